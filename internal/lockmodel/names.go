package lockmodel

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/consullock/terraform-provider-consullock/internal/validation"
)

// NamePattern is the rule for every name this product declares (locks,
// session profiles, ACL policies). It is Consul's ACL policy name rule
// (consul agent/consul/acl_endpoint.go, validPolicyName), so a lock name can always
// become part of a policy name and of a registry key.
const NamePattern = `^[A-Za-z0-9_-]{1,128}$`

// NameAllowed is the Allowed text of a name error.
const NameAllowed = "use 1 to 128 letters, digits, '-' or '_'"

var nameRE = regexp.MustCompile(NamePattern)

// ValidateName checks name against NamePattern and reports a *FieldError for
// field when it does not match.
func ValidateName(field, name string) error {
	if nameRE.MatchString(name) {
		return nil
	}
	return &validation.FieldError{Field: field, Value: name, Allowed: NameAllowed}
}

// MaxKeyPathLength is the longest KV path NormalizeKeyPath accepts, in bytes.
const MaxKeyPathLength = 512

// KeyPathAllowed describes the KV paths NormalizeKeyPath accepts.
const KeyPathAllowed = "use 1 to 512 bytes of letters, digits, '-', '_', '.', ':', '@' or '+' " +
	"in segments separated by single '/' (leading and trailing '/' are dropped); " +
	"a segment may not be '.' or '..'"

// NormalizeKeyPath returns p without leading and trailing "/", or a
// *FieldError for field when p is not a path this product will write into an
// ACL rule or a Consul URL. The character set is deliberately small: nothing
// that needs quoting in HCL (quotes, backslash, "${", "%{"), nothing with a
// meaning in a URL (?, #, %, =, whitespace), no globs, nothing non-ASCII.
// Segments "." and ".." are refused because HTTP clients and proxies collapse
// them; a segment that merely starts with a dot (".lock") is fine.
func NormalizeKeyPath(field, p string) (string, error) {
	fail := func(why string) (string, error) {
		return "", &validation.FieldError{Field: field, Value: p, Allowed: why + "; " + KeyPathAllowed}
	}
	for i := 0; i < len(p); {
		c := p[i]
		if keyPathByte(c) {
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			r, _ := utf8.DecodeRuneInString(p[i:])
			if r == utf8.RuneError {
				return fail("it is not valid UTF-8")
			}
			return fail(fmt.Sprintf("it contains the non-ASCII character %q", r))
		}
		return fail("it contains " + describeByte(c))
	}
	n := strings.Trim(p, "/")
	if n == "" {
		return fail("it is empty")
	}
	if len(n) > MaxKeyPathLength {
		return fail(fmt.Sprintf("it is %d bytes long", len(n)))
	}
	for _, seg := range strings.Split(n, "/") {
		switch seg {
		case "":
			return fail("it has an empty segment ('//')")
		case ".", "..":
			return fail(fmt.Sprintf("it has a %q segment", seg))
		}
	}
	return n, nil
}

func keyPathByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '-', '_', '.', '/', ':', '@', '+':
		return true
	}
	return false
}

func describeByte(c byte) string {
	switch {
	case c == ' ':
		return "a space"
	case c == '\t':
		return "a tab"
	case c == '\n' || c == '\r':
		return "a line break"
	case c < 0x20 || c == 0x7f:
		return fmt.Sprintf("the control character 0x%02x", c)
	}
	return fmt.Sprintf("the character %q", rune(c))
}

// Registry kinds: the folder of each declaration type under the registry
// prefix.
const (
	KindSessionDefaults = "session-defaults"
	KindLock            = "locks"
	KindACLPolicy       = "acl-policies"
)

// The registry folders of the records that are not declarations: a lock's
// run ledger and its pause (their codec is package record's).
const (
	KindRuns   = "runs"
	KindPauses = "pauses"
)

// RegistryKinds lists the registry kinds in a stable order.
func RegistryKinds() []string {
	return []string{KindSessionDefaults, KindLock, KindACLPolicy}
}

// RegistryKey is where the declaration name of the given kind is stored:
// <registryPrefix>/<kind>/<name>. registryPrefix should come from
// ValidateRegistryPrefix; surrounding slashes are dropped regardless.
func RegistryKey(registryPrefix, kind, name string) string {
	return RegistryFolder(registryPrefix, kind) + name
}

// RegistryFolder is the folder holding every declaration of kind, with a
// trailing "/", ready for a recursive KV list: <registryPrefix>/<kind>/.
func RegistryFolder(registryPrefix, kind string) string {
	if p := strings.Trim(registryPrefix, "/"); p != "" {
		return p + "/" + kind + "/"
	}
	return kind + "/"
}

// ValidateRegistryPrefix normalises the provider's registry_prefix with
// NormalizeKeyPath.
func ValidateRegistryPrefix(p string) (string, error) {
	return NormalizeKeyPath("registry_prefix", p)
}
