package main

import (
	"fmt"
	"sort"
	"strings"
)

// Flags values that identify the lock kind (Consul's api/lock.go and
// api/semaphore.go).
const (
	lockFlagValue      = "0x2ddccbc058a50c18"
	semaphoreFlagValue = "0xe0f69a2baa414de0"
)

// attrs lists, per consullock resource type, the attributes a reviewer
// needs, in the order shown. Other changed attributes follow them; values
// marked sensitive are never shown.
var attrs = map[string][]string{
	"consullock_session_defaults": {"name", "ttl", "lock_delay", "behavior", "node_checks", "service_checks", "renew_every", "worst_case_gap", "registry_key"},
	"consullock_lock":             {"name", "key", "prefix", "limit", "flags", "session_defaults", "max_hold", "force_destroy", "registry_key"},
	"consullock_acl_policy":       {"name", "datacenters", "lock_keys", "semaphore_prefixes", "session_node_prefixes", "read_keys", "agent_read", "registry_key"},
	"consullock_acl_token":        {"description", "policies", "local", "expiration_ttl", "accessor_id"},
}

// typeOrder sorts the consullock sections: profiles, locks, policies, tokens.
var typeOrder = map[string]int{
	"consullock_session_defaults": 0,
	"consullock_lock":             1,
	"consullock_acl_policy":       2,
	"consullock_acl_token":        3,
}

// always are the attributes shown in an update even when unchanged: what
// identifies the object, and the figure a reviewer weighs.
var always = map[string]map[string]bool{
	"consullock_session_defaults": {"name": true, "worst_case_gap": true},
	"consullock_lock":             {"name": true, "key": true, "limit": true},
	"consullock_acl_policy":       {"name": true},
	"consullock_acl_token":        {"description": true, "policies": true},
}

// hidden are attributes the summary leaves out: identifiers that say
// nothing to a reviewer, and the rules (shown as a diff instead).
var hidden = map[string]bool{"id": true, "rules": true, "secret_id": true}

type options struct {
	// diagnostics from the plan log; nil when no log was given.
	diagnostics []diagnostic
	logGiven    bool
	title       string
}

// render writes the Markdown summary of a plan. Without a plan (OpenTofu
// failed before writing one) it reports the errors from the plan log.
func render(p *plan, opts options) string {
	var b strings.Builder
	title := opts.title
	if title == "" {
		title = "OpenTofu plan"
	}
	if p == nil {
		fmt.Fprintf(&b, "## %s: plan failed\n\nOpenTofu produced no plan.\n\n", title)
		renderDiagnostics(&b, opts)
		return b.String()
	}
	groups := map[action][]resourceChange{}
	for _, rc := range p.ResourceChanges {
		a := rc.Change.action()
		groups[a] = append(groups[a], rc)
	}
	// OpenTofu saves an errored plan (it cannot be applied) and says so in
	// its JSON; Terraform 1.5 saves one too but without "errored": the
	// errors in the plan log tell then.
	if p.Errored || hasErrors(opts.diagnostics) {
		fmt.Fprintf(&b, "## %s: plan failed\n\n", title)
		b.WriteString("> [!CAUTION]\n> The plan **errored** and cannot be applied: below is only what OpenTofu planned before the error.\n\n")
	} else {
		fmt.Fprintf(&b, "## %s: %s\n\n", title, headline(groups))
	}
	if p.TerraformVersion != "" {
		fmt.Fprintf(&b, "<sub>Planned with OpenTofu/Terraform %s (plan format %s).</sub>\n\n", p.TerraformVersion, p.FormatVersion)
	}

	renderActions(&b, groups)
	renderDrift(&b, p.ResourceDrift)
	renderConsullock(&b, p.ResourceChanges)
	renderOutputs(&b, p.OutputChanges)
	renderDiagnostics(&b, opts)
	return b.String()
}

func hasErrors(diags []diagnostic) bool {
	for _, d := range diags {
		if d.Severity == "error" {
			return true
		}
	}
	return false
}

func headline(groups map[action][]resourceChange) string {
	add := len(groups[actCreate]) + len(groups[actReplace])
	change := len(groups[actUpdate])
	destroy := len(groups[actDelete]) + len(groups[actReplace])
	if add+change+destroy+len(groups[actImport])+len(groups[actForget]) == 0 {
		return "no changes"
	}
	parts := []string{}
	if n := len(groups[actImport]); n > 0 {
		parts = append(parts, fmt.Sprintf("%d to import", n))
	}
	parts = append(parts, fmt.Sprintf("%d to add, %d to change, %d to destroy", add, change, destroy))
	if n := len(groups[actForget]); n > 0 {
		parts = append(parts, fmt.Sprintf("%d to forget", n))
	}
	return strings.Join(parts, ", ")
}

func renderActions(b *strings.Builder, groups map[action][]resourceChange) {
	b.WriteString("| Action | Count | Resources |\n|---|---:|---|\n")
	rows := 0
	order := append([]action{}, actionOrder...)
	for a := range groups { // actions this program does not know, last
		if a != actNoop && !containsAction(order, a) {
			order = append(order, a)
		}
	}
	for _, a := range order {
		list := groups[a]
		if len(list) == 0 {
			continue
		}
		addrs := make([]string, len(list))
		for i, rc := range list {
			addrs[i] = code(rc.Address)
		}
		sort.Strings(addrs)
		sym := symbols[a]
		if sym == "" {
			sym = "?"
		}
		fmt.Fprintf(b, "| `%s` %s | %d | %s |\n", sym, a, len(list), strings.Join(addrs, "<br>"))
		rows++
	}
	if n := len(groups[actNoop]); n > 0 {
		fmt.Fprintf(b, "| unchanged | %d | |\n", n)
		rows++
	}
	if rows == 0 {
		b.WriteString("| — | 0 | |\n")
	}
	b.WriteString("\n")
}

func containsAction(list []action, a action) bool {
	for _, x := range list {
		if x == a {
			return true
		}
	}
	return false
}

// renderDrift shows what changed in Consul since the last apply: the
// refresh found it, and the plan puts it back.
func renderDrift(b *strings.Builder, drift []resourceChange) {
	if len(drift) == 0 {
		return
	}
	b.WriteString("### Changed outside OpenTofu\n\n")
	b.WriteString("The refresh found these objects changed since the last apply (an out-of-band edit, or the controller); the changes below put the configuration back.\n\n")
	for _, rc := range sortedConsullockFirst(drift) {
		a := rc.Change.action()
		what := "changed"
		switch a {
		case actDelete:
			what = "deleted"
		case actCreate:
			what = "appeared"
		}
		fmt.Fprintf(b, "#### %s %s\n\n", code(rc.Address), what)
		if a == actDelete || !isConsullock(rc) {
			continue
		}
		writeAttrTable(b, rc, true)
		if rc.Type == "consullock_acl_policy" {
			writeRulesDiff(b, rc.Change, "ACL rules (`-` as last applied, `+` as found in Consul):")
		}
	}
}

func renderConsullock(b *strings.Builder, changes []resourceChange) {
	var managed, reads []resourceChange
	for _, rc := range changes {
		if !isConsullock(rc) {
			continue
		}
		switch a := rc.Change.action(); {
		case a == actNoop:
		case rc.Mode == "data":
			reads = append(reads, rc)
		default:
			managed = append(managed, rc)
		}
	}
	if len(managed) == 0 && len(reads) == 0 {
		return
	}
	b.WriteString("### consullock changes\n\n")
	for _, rc := range sortedConsullockFirst(managed) {
		a := rc.Change.action()
		fmt.Fprintf(b, "#### `%s` %s (%s)\n\n", symbols[a], code(rc.Address), a)
		if rc.Change.Importing != nil {
			fmt.Fprintf(b, "Imported from %s.\n\n", code(rc.Change.Importing.ID))
		}
		if a == actReplace && len(rc.Change.ReplacePaths) > 0 {
			fmt.Fprintf(b, "Replaced because %s cannot change in place.\n\n", pathsText(rc.Change.ReplacePaths))
		}
		writeAttrTable(b, rc, a != actCreate && a != actDelete && a != actForget)
		writeNotes(b, rc, a)
		if rc.Type == "consullock_acl_policy" {
			writeRulesDiff(b, rc.Change, "ACL rules (`-` before, `+` after):")
		}
	}
	if len(reads) > 0 {
		b.WriteString("Data sources read during apply (their values are not known at plan time):\n\n")
		for _, rc := range reads {
			fmt.Fprintf(b, "- %s", code(rc.Address))
			if k := rc.Change.afterValue("key"); k.state == stateKnown {
				fmt.Fprintf(b, ", key %s", k.text())
			}
			b.WriteString("\n")
		}
		b.WriteString("\n")
	}
}

// writeAttrTable writes the reviewer's attributes: after values for a
// create, before values for a destroy, both otherwise (changed ones in bold).
func writeAttrTable(b *strings.Builder, rc resourceChange, both bool) {
	c := rc.Change
	a := c.action()
	names := append([]string{}, attrs[rc.Type]...)
	listed := map[string]bool{}
	for _, n := range names {
		listed[n] = true
	}
	for _, n := range changedAttrs(c) {
		if !listed[n] && !hidden[n] {
			names = append(names, n)
		}
	}
	if both {
		visible := 0
		for _, n := range names {
			if !hidden[n] && !c.beforeValue(n).equal(c.afterValue(n)) {
				visible++
			}
		}
		if visible == 0 {
			return
		}
		b.WriteString("| Attribute | Before | After |\n|---|---|---|\n")
	} else {
		b.WriteString("| Attribute | Value |\n|---|---|\n")
	}
	for _, n := range names {
		before, after := c.beforeValue(n), c.afterValue(n)
		switch {
		case both:
			if before.equal(after) {
				if always[rc.Type][n] && before.state != stateNull {
					fmt.Fprintf(b, "| %s | %s | _(unchanged)_ |\n", n, describe(rc.Type, n, before))
				}
				continue
			}
			fmt.Fprintf(b, "| **%s** | %s | %s |\n", n, describe(rc.Type, n, before), describe(rc.Type, n, after))
		case a == actDelete || a == actForget:
			if before.state == stateNull {
				continue
			}
			fmt.Fprintf(b, "| %s | %s |\n", n, before.text())
		default:
			if after.state == stateNull {
				continue
			}
			fmt.Fprintf(b, "| %s | %s |\n", n, describe(rc.Type, n, after))
		}
	}
	b.WriteString("\n")
}

// describe renders a value with what it means where that is not obvious.
func describe(typ, attr string, v value) string {
	s := v.text()
	if typ == "consullock_lock" && v.state == stateKnown {
		switch attr {
		case "limit":
			if fmt.Sprint(v.v) == "1" {
				s += " (mutex)"
			} else {
				s += " (semaphore)"
			}
		case "flags":
			switch v.str() {
			case lockFlagValue:
				s += " (api.Lock)"
			case semaphoreFlagValue:
				s += " (api.Semaphore)"
			}
		}
	}
	return s
}

// writeNotes adds what the plan implies for holders.
func writeNotes(b *strings.Builder, rc resourceChange, a action) {
	c := rc.Change
	var notes []string
	switch rc.Type {
	case "consullock_session_defaults":
		if gap := c.afterValue("worst_case_gap"); gap.state == stateKnown && a != actDelete {
			notes = append(notes, fmt.Sprintf("**worst_case_gap %s**: after a holder crashes, nobody runs the job for up to %s (2 × ttl + lock_delay); a holder cut off from the cluster may keep running that long after it lost the lock.", gap.str(), gap.str()))
		}
		if a == actUpdate || a == actReplace {
			notes = append(notes, "Holders pick up new session settings when they next create a session (`consullock run` reads the profile at start).")
		}
	case "consullock_lock":
		if a == actDelete || a == actReplace {
			fd := c.beforeValue("force_destroy")
			if fd.state == stateKnown && fd.v == true {
				notes = append(notes, "`force_destroy = true`: the current holders' sessions are ended (their lock-delay applies) and the key deleted.")
			} else {
				notes = append(notes, "`force_destroy = false`: the apply fails, naming the holder, if the lock is held at that moment.")
			}
		}
	case "consullock_acl_policy":
		if a == actDelete {
			notes = append(notes, "Tokens holding this policy lose its permissions.")
		}
	case "consullock_acl_token":
		notes = append(notes, "`secret_id` is sensitive and never shown here.")
		if a == actReplace || a == actDelete {
			notes = append(notes, "The current secret stops working: whoever uses it needs the new one.")
		}
	}
	if len(notes) > 0 {
		b.WriteString("> " + strings.Join(notes, "\n>\n> ") + "\n\n")
	}
}

// writeRulesDiff writes the ACL rules of a policy change as a diff.
func writeRulesDiff(b *strings.Builder, c change, heading string) {
	before, after := c.beforeValue("rules"), c.afterValue("rules")
	a := c.action()
	switch {
	case before.state == stateSensitive || after.state == stateSensitive:
		b.WriteString("ACL rules: _(sensitive)_\n\n")
		return
	case after.state == stateUnknown && a != actDelete:
		b.WriteString("ACL rules: _(known after apply)_; they depend on values not known at plan time.\n\n")
		return
	}
	var old, cur string
	if before.state == stateKnown {
		old = before.str()
	}
	if after.state == stateKnown && a != actDelete {
		cur = after.str()
	}
	if old == cur && a != actCreate {
		if cur != "" {
			b.WriteString("ACL rules: unchanged.\n\n")
		}
		return
	}
	lines := diffLines(splitLines(old), splitLines(cur))
	body := strings.Join(lines, "\n")
	fence := "```"
	for strings.Contains(body, fence) {
		fence += "`"
	}
	fmt.Fprintf(b, "%s\n\n%sdiff\n%s\n%s\n\n", heading, fence, body, fence)
}

func splitLines(s string) []string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// diffLines returns a line diff of a and b in unified style (every line,
// prefixed "-", "+" or " "), from a longest common subsequence. ACL rules
// are short; past maxDiffLines it shows all of a removed and all of b added.
func diffLines(a, b []string) []string {
	const maxDiffLines = 2000
	var out []string
	if len(a) > maxDiffLines || len(b) > maxDiffLines {
		for _, l := range a {
			out = append(out, "-"+l)
		}
		for _, l := range b {
			out = append(out, "+"+l)
		}
		return out
	}
	// lcs[i][j] is the LCS length of a[i:] and b[j:].
	lcs := make([][]int, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case a[i] == b[j]:
			out = append(out, " "+a[i])
			i++
			j++
		case lcs[i+1][j] >= lcs[i][j+1]:
			out = append(out, "-"+a[i])
			i++
		default:
			out = append(out, "+"+b[j])
			j++
		}
	}
	for ; i < len(a); i++ {
		out = append(out, "-"+a[i])
	}
	for ; j < len(b); j++ {
		out = append(out, "+"+b[j])
	}
	return out
}

func renderOutputs(b *strings.Builder, outputs map[string]outputChange) {
	var names []string
	for name, oc := range outputs {
		if a := (change{Actions: oc.Actions}).action(); a != actNoop {
			names = append(names, fmt.Sprintf("%s (%s)", code(name), a))
		}
	}
	if len(names) == 0 {
		return
	}
	sort.Strings(names)
	fmt.Fprintf(b, "Outputs changing: %s.\n\n", strings.Join(names, ", "))
}

func renderDiagnostics(b *strings.Builder, opts options) {
	if !opts.logGiven {
		b.WriteString("<sub>Warnings are not part of the plan JSON. Run `tofu plan -json` and pass its output with `-log` to list them here.</sub>\n")
		return
	}
	var warnings, errors []diagnostic
	for _, d := range opts.diagnostics {
		switch d.Severity {
		case "error":
			errors = append(errors, d)
		case "warning":
			warnings = append(warnings, d)
		}
	}
	for _, group := range []struct {
		title string
		list  []diagnostic
	}{{"Errors", errors}, {"Warnings", warnings}} {
		if len(group.list) == 0 {
			continue
		}
		fmt.Fprintf(b, "### %s\n\n", group.title)
		for _, d := range group.list {
			fmt.Fprintf(b, "- **%s**", oneLine(d.Summary))
			if d.Address != "" {
				fmt.Fprintf(b, " (%s)", code(d.Address))
			}
			if d.Detail != "" {
				fmt.Fprintf(b, ": %s", oneLine(d.Detail))
			}
			b.WriteString("\n")
		}
		b.WriteString("\n")
	}
	if len(warnings)+len(errors) == 0 {
		b.WriteString("No warnings.\n")
	}
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

func isConsullock(rc resourceChange) bool {
	return strings.HasPrefix(rc.Type, "consullock_")
}

// sortedConsullockFirst orders changes by type (profiles, locks, policies,
// tokens, the rest) and address.
func sortedConsullockFirst(list []resourceChange) []resourceChange {
	out := append([]resourceChange{}, list...)
	rank := func(rc resourceChange) int {
		if r, ok := typeOrder[rc.Type]; ok {
			return r
		}
		if isConsullock(rc) {
			return len(typeOrder)
		}
		return len(typeOrder) + 1
	}
	sort.SliceStable(out, func(i, j int) bool {
		ri, rj := rank(out[i]), rank(out[j])
		if ri != rj {
			return ri < rj
		}
		return out[i].Address < out[j].Address
	})
	return out
}

// changedAttrs lists the attributes whose before and after differ, sorted.
func changedAttrs(c change) []string {
	seen := map[string]bool{}
	for _, obj := range []any{c.Before, c.After, c.AfterUnknown} {
		if m, ok := obj.(map[string]any); ok {
			for k := range m {
				seen[k] = true
			}
		}
	}
	var out []string
	for k := range seen {
		if !c.beforeValue(k).equal(c.afterValue(k)) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// pathsText renders replace_paths ([["limit"], ["a", 0, "b"]]) as
// `limit`, `a[0].b`.
func pathsText(paths [][]any) string {
	parts := make([]string, 0, len(paths))
	for _, p := range paths {
		var s strings.Builder
		for i, step := range p {
			switch t := step.(type) {
			case string:
				if i > 0 {
					s.WriteString(".")
				}
				s.WriteString(t)
			default:
				fmt.Fprintf(&s, "[%v]", t)
			}
		}
		parts = append(parts, code(s.String()))
	}
	return strings.Join(parts, ", ")
}
