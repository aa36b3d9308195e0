package provider

import "maps"

// withAttributes is base with the attributes of more added: a schema's
// attributes written in groups, one function per concern.
func withAttributes[A any](base map[string]A, more ...map[string]A) map[string]A {
	for _, m := range more {
		maps.Copy(base, m)
	}
	return base
}
