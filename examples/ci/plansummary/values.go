package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// valueState is one attribute on one side of a change, as a reviewer may
// see it: sensitive values are never rendered.
type valueState int

const (
	stateAbsent    valueState = iota // the side does not exist (create's before, delete's after)
	stateNull                        // known and null
	stateKnown                       // known and not null
	stateUnknown                     // known only after apply
	statePartial                     // a collection with some unknown elements
	stateSensitive                   // marked sensitive: never shown
)

type value struct {
	state valueState
	v     any
}

// beforeValue and afterValue return an attribute of the change's object.
func (c change) beforeValue(attr string) value {
	return attrValue(c.Before, nil, c.BeforeSensitive, attr)
}

func (c change) afterValue(attr string) value {
	return attrValue(c.After, c.AfterUnknown, c.AfterSensitive, attr)
}

func attrValue(obj, unknown, sensitive any, attr string) value {
	if isMarked(sensitive, attr) {
		// Kept to tell a changed secret from an unchanged one; never rendered.
		var raw any
		if m, ok := obj.(map[string]any); ok {
			raw = m[attr]
		}
		return value{state: stateSensitive, v: raw}
	}
	if u := mark(unknown, attr); u == true {
		return value{state: stateUnknown}
	}
	m, ok := obj.(map[string]any)
	if !ok {
		if unknown == true {
			return value{state: stateUnknown}
		}
		return value{state: stateAbsent}
	}
	v, present := m[attr]
	if !present || v == nil {
		if u := mark(unknown, attr); u != nil && containsTrue(u) {
			return value{state: stateUnknown}
		}
		return value{state: stateNull}
	}
	if u := mark(unknown, attr); u != nil && containsTrue(u) {
		return value{state: statePartial, v: v}
	}
	return value{state: stateKnown, v: v}
}

// mark returns the marker of attr in an after_unknown/…_sensitive tree:
// true for the whole value, an object or array for parts, nil for none.
func mark(marks any, attr string) any {
	if marks == true {
		return true
	}
	if m, ok := marks.(map[string]any); ok {
		return m[attr]
	}
	return nil
}

// isMarked reports whether any part of attr is marked sensitive: a value
// with a sensitive element is withheld as a whole.
func isMarked(marks any, attr string) bool {
	m := mark(marks, attr)
	return m != nil && containsTrue(m)
}

func containsTrue(m any) bool {
	switch t := m.(type) {
	case bool:
		return t
	case []any:
		for _, e := range t {
			if containsTrue(e) {
				return true
			}
		}
	case map[string]any:
		for _, e := range t {
			if containsTrue(e) {
				return true
			}
		}
	}
	return false
}

// equal reports whether two sides show the same thing to a reviewer.
func (v value) equal(o value) bool {
	if v.state != o.state {
		return false
	}
	if v.state != stateKnown && v.state != statePartial && v.state != stateSensitive {
		return true
	}
	a, _ := json.Marshal(v.v)
	b, _ := json.Marshal(o.v)
	return string(a) == string(b)
}

// text renders a value for a Markdown table cell.
func (v value) text() string {
	switch v.state {
	case stateAbsent:
		return ""
	case stateNull:
		return "—"
	case stateUnknown:
		return "_(known after apply)_"
	case stateSensitive:
		return "_(sensitive)_"
	}
	s := inline(v.v)
	if v.state == statePartial {
		s += " _(partly known after apply)_"
	}
	return s
}

// str returns a known string value, or "".
func (v value) str() string {
	if v.state != stateKnown {
		return ""
	}
	s, _ := v.v.(string)
	return s
}

// inline renders any JSON value compactly as Markdown code.
func inline(v any) string {
	switch t := v.(type) {
	case nil:
		return "—"
	case string:
		return code(t)
	case json.Number, bool:
		return code(fmt.Sprint(t))
	case []any:
		if len(t) == 0 {
			return "_(empty)_"
		}
		parts := make([]string, len(t))
		for i, e := range t {
			parts[i] = inline(e)
		}
		return strings.Join(parts, ", ")
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, 0, len(keys))
		for _, k := range keys {
			if t[k] == nil {
				continue
			}
			parts = append(parts, k+" = "+inline(t[k]))
		}
		return "{" + strings.Join(parts, "; ") + "}"
	}
	return code(fmt.Sprint(v))
}

// code renders s as an inline code span that is safe in a table cell.
func code(s string) string {
	if s == "" {
		return "`\"\"`"
	}
	s = strings.ReplaceAll(s, "\n", "⏎")
	s = strings.ReplaceAll(s, "|", "\\|")
	fence := "`"
	for strings.Contains(s, fence) {
		fence += "`"
	}
	if strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") {
		return fence + " " + s + " " + fence
	}
	return fence + s + fence
}
