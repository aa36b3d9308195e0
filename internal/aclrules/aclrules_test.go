package aclrules

import (
	"strings"
	"testing"

	"github.com/consullock/terraform-provider-consullock/internal/validation"
)

func TestRenderRules_designExamples(t *testing.T) {
	tests := []struct {
		name string
		in   RulesInput
		want string
	}{
		{
			name: "mutex holder",
			in: RulesInput{
				LockKeys:            []string{"jobs/backup/.lock"},
				SessionNodePrefixes: []string{"worker-"},
			},
			want: `key "jobs/backup/.lock" {
  policy = "write"
}

session_prefix "worker-" {
  policy = "write"
}
`,
		},
		{
			name: "consul lock with a semaphore, a declaration record and any node",
			in: RulesInput{
				LockKeys:            []string{"service/job/leader"},
				SemaphorePrefixes:   []string{"jobs/reindex"},
				ReadKeys:            []string{"consul-lock/locks/reindex"},
				SessionNodePrefixes: []string{""},
				AgentRead:           true,
			},
			want: `key "service/job/leader" {
  policy = "write"
}

key_prefix "jobs/reindex/" {
  policy = "write"
}

key "consul-lock/locks/reindex" {
  policy = "read"
}

session_prefix "" {
  policy = "write"
}

agent_prefix "" {
  policy = "read"
}
`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.in.Validate(); err != nil {
				t.Fatalf("Validate() = %v, want nil", err)
			}
			got := RenderRules(tt.in)
			if got != tt.want {
				t.Errorf("RenderRules() =\n%s\nwant\n%s", got, tt.want)
			}
			if again := RenderRules(tt.in); again != got {
				t.Errorf("RenderRules() is not deterministic:\n%s\nthen\n%s", got, again)
			}
		})
	}
}

func TestRenderRules_sortsDeduplicatesAndWriteWins(t *testing.T) {
	in := RulesInput{
		LockKeys:            []string{"b/.lock", "/a/.lock", "b/.lock/", "a/.lock"},
		SemaphorePrefixes:   []string{"sem/z/", "sem/a", "/sem/a"},
		ReadKeys:            []string{"b/.lock", "r/2", "r/1", "r/2"},
		SessionNodePrefixes: []string{"web-", "db-", "web-"},
	}
	want := `key "a/.lock" {
  policy = "write"
}

key "b/.lock" {
  policy = "write"
}

key_prefix "sem/a/" {
  policy = "write"
}

key_prefix "sem/z/" {
  policy = "write"
}

key "r/1" {
  policy = "read"
}

key "r/2" {
  policy = "read"
}

session_prefix "db-" {
  policy = "write"
}

session_prefix "web-" {
  policy = "write"
}
`
	if err := in.Validate(); err != nil {
		t.Fatalf("Validate() = %v, want nil", err)
	}
	if got := RenderRules(in); got != want {
		t.Errorf("RenderRules() =\n%s\nwant\n%s", got, want)
	}
}

func TestRenderRules_isCanonical(t *testing.T) {
	ins := []RulesInput{
		{LockKeys: []string{"x/.lock"}, SessionNodePrefixes: []string{"n"}},
		{SemaphorePrefixes: []string{"s"}, ReadKeys: []string{"a", "x/.lock"}, SessionNodePrefixes: []string{"", "n"}, AgentRead: true},
	}
	for _, in := range ins {
		r := RenderRules(in)
		n, err := NormalizeRules(r)
		if err != nil {
			t.Fatalf("NormalizeRules(%q) error: %v", r, err)
		}
		if n != r {
			t.Errorf("NormalizeRules(RenderRules()) =\n%s\nwant RenderRules() unchanged:\n%s", n, r)
		}
	}
}

const baseRules = `key "a/.lock" {
  policy = "write"
}

session_prefix "worker-" {
  policy = "write"
}
`

func TestRulesInputValidate_rejectsWithAttributeAndValue(t *testing.T) {
	ok := RulesInput{LockKeys: []string{"a/.lock"}, SessionNodePrefixes: []string{"n-"}}
	tests := []struct {
		name      string
		edit      func(in *RulesInput)
		field     string
		value     string
		wantInMsg string
	}{
		{"quote in lock key", func(in *RulesInput) { in.LockKeys = []string{`a"} key_prefix "" {`} }, "lock_keys", `a"} key_prefix "" {`, "lock_keys"},
		{"newline in lock key", func(in *RulesInput) { in.LockKeys = []string{"a\nb"} }, "lock_keys", "a\nb", "lock_keys"},
		{"brace in semaphore prefix", func(in *RulesInput) { in.SemaphorePrefixes = []string{"jobs}"} }, "semaphore_prefixes", "jobs}", "semaphore_prefixes"},
		{"dot-dot in read key", func(in *RulesInput) { in.ReadKeys = []string{"a/../b"} }, "read_keys", "a/../b", "read_keys"},
		{"empty lock key", func(in *RulesInput) { in.LockKeys = []string{""} }, "lock_keys", "", "lock_keys"},
		{"only slashes", func(in *RulesInput) { in.SemaphorePrefixes = []string{"//"} }, "semaphore_prefixes", "//", "semaphore_prefixes"},
		{"empty segment", func(in *RulesInput) { in.LockKeys = []string{"a//b"} }, "lock_keys", "a//b", "lock_keys"},
		{"interpolation", func(in *RulesInput) { in.ReadKeys = []string{"${var.x}"} }, "read_keys", "${var.x}", "read_keys"},
		{"non-ASCII", func(in *RulesInput) { in.LockKeys = []string{"jobs/é"} }, "lock_keys", "jobs/é", "lock_keys"},
		{"glob in node prefix", func(in *RulesInput) { in.SessionNodePrefixes = []string{"web-*"} }, "session_node_prefixes", "web-*", `"" (any node)`},
		{"quote in node prefix", func(in *RulesInput) { in.SessionNodePrefixes = []string{`a" {`} }, "session_node_prefixes", `a" {`, "session_node_prefixes"},
		{"no node prefix", func(in *RulesInput) { in.SessionNodePrefixes = nil }, "session_node_prefixes", "[]", "at least one node-name prefix"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := ok
			tt.edit(&in)
			err := in.Validate()
			if err == nil {
				t.Fatal("Validate() = nil, want an error")
			}
			fes := validation.AsFieldErrors(err)
			if len(fes) != 1 {
				t.Fatalf("Validate() = %v, want exactly one field error", err)
			}
			if fes[0].Field != tt.field || fes[0].Value != tt.value {
				t.Errorf("field error = {%q, %q}, want {%q, %q}", fes[0].Field, fes[0].Value, tt.field, tt.value)
			}
			if !strings.Contains(err.Error(), tt.wantInMsg) {
				t.Errorf("error %q does not contain %q", err, tt.wantInMsg)
			}
		})
	}
	if err := ok.Validate(); err != nil {
		t.Errorf("Validate() of a good input = %v", err)
	}
}

func TestRulesInputValidate_reportsEveryProblem(t *testing.T) {
	in := RulesInput{LockKeys: []string{"", "ok"}, ReadKeys: []string{"a b"}}
	fes := validation.AsFieldErrors(in.Validate())
	var fields []string
	for _, fe := range fes {
		fields = append(fields, fe.Field)
	}
	if got, want := strings.Join(fields, ","), "lock_keys,read_keys,session_node_prefixes"; got != want {
		t.Errorf("fields = %s, want %s", got, want)
	}
}

func TestRenderRules_invalidInputStaysInItsBlock(t *testing.T) {
	// Validate refuses this, but even unvalidated input must not open a
	// second rule through quoting.
	in := RulesInput{
		LockKeys:            []string{"a\" {\n policy = \"write\"\n}\nkey_prefix \"\" {\n policy = \"write\"\n}\nkey \"b"},
		SessionNodePrefixes: []string{"${x}\\"},
	}
	p, err := ParseRules(RenderRules(in))
	if err != nil {
		t.Fatalf("ParseRules(RenderRules()) error: %v", err)
	}
	if len(p.Rules) != 2 || p.Rules[0].Name != in.LockKeys[0] || p.Rules[1].Name != in.SessionNodePrefixes[0] {
		t.Errorf("rules = %+v, want exactly the two given names", p.Rules)
	}
}

func TestRulesInputWarnings(t *testing.T) {
	tests := []struct {
		name         string
		in           RulesInput
		lockPrefixes []string
		want         []string // "field: summary" plus a detail fragment
	}{
		{
			name:         "scoped and declared",
			in:           RulesInput{LockKeys: []string{"jobs/backup/.lock"}, SessionNodePrefixes: []string{"worker-"}},
			lockPrefixes: []string{"jobs/backup"},
		},
		{
			name: "any node",
			in:   RulesInput{LockKeys: []string{"jobs/backup/.lock"}, SessionNodePrefixes: []string{"", "x"}},
			want: []string{"session_node_prefixes: Sessions on any node"},
		},
		{
			name:         "lock key and semaphore outside the declared locks",
			in:           RulesInput{LockKeys: []string{"jobs/backupx/.lock", "jobs/backup/.lock"}, SemaphorePrefixes: []string{"sem/b"}, SessionNodePrefixes: []string{"w"}},
			lockPrefixes: []string{"/jobs/backup/", "sem/a"},
			want: []string{
				`lock_keys: Lock key outside the declared locks: "jobs/backupx/.lock"`,
				`semaphore_prefixes: Semaphore prefix outside the declared locks: "sem/b"`,
			},
		},
		{
			name:         "no declared locks known",
			in:           RulesInput{LockKeys: []string{"anything"}, SessionNodePrefixes: []string{"w"}},
			lockPrefixes: nil,
		},
		{
			name:         "no declared locks at all",
			in:           RulesInput{LockKeys: []string{"anything"}, SessionNodePrefixes: []string{"w"}},
			lockPrefixes: []string{},
			want:         []string{`lock_keys: Lock key outside the declared locks: "anything"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ws := tt.in.Warnings(tt.lockPrefixes)
			if len(ws) != len(tt.want) {
				t.Fatalf("Warnings() = %+v, want %d", ws, len(tt.want))
			}
			for i, w := range ws {
				head, frag, _ := strings.Cut(tt.want[i], ": ")
				summary, detail, _ := strings.Cut(frag, ": ")
				if w.Field != head || w.Summary != summary || !strings.Contains(w.Detail, detail) {
					t.Errorf("warning %d = %+v, want %q", i, w, tt.want[i])
				}
			}
		})
	}
}

func TestSessionRuleWarnings(t *testing.T) {
	tests := []struct {
		name, rules string
		want        int
	}{
		{"exact session rule", `session "job-lock" { policy = "write" }`, 1},
		{"inside a namespace", `namespace "a" { session "job-lock" { policy = "write" } }`, 1},
		{"session_prefix only", `session_prefix "worker-" { policy = "write" }`, 0},
		{"unparsable", `session "x" {`, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ws := SessionRuleWarnings(tt.rules)
			if len(ws) != tt.want {
				t.Fatalf("SessionRuleWarnings() = %+v, want %d", ws, tt.want)
			}
			for _, w := range ws {
				if w.Field != "rules" || !strings.Contains(w.Detail, "node names, not session names") ||
					!strings.Contains(w.Detail, `session_prefix "job-lock"`) {
					t.Errorf("warning = %+v", w)
				}
			}
		})
	}
}

func TestRenderRules_queuePrefixes(t *testing.T) {
	in := RulesInput{LockKeys: []string{"svc/job/.lock"}, QueuePrefixes: []string{"/svc/job/"}, SessionNodePrefixes: []string{"worker-"}}
	got := RenderRules(in)
	if !strings.Contains(got, `key_prefix "svc/job/.queue/" {`) {
		t.Fatalf("rules lack the queue grant:\n%s", got)
	}
	back, exact, err := RulesInputFromRules(got)
	if err != nil || !exact || len(back.QueuePrefixes) != 1 || back.QueuePrefixes[0] != "svc/job" || len(back.SemaphorePrefixes) != 0 {
		t.Fatalf("RulesInputFromRules = %+v, exact %v, %v; want the queue prefix back, not a semaphore prefix", back, exact, err)
	}
	ws := in.Warnings([]string{"other"})
	if len(ws) != 2 || ws[1].Field != "queue_prefixes" {
		t.Errorf("Warnings with no declared lock under svc/job = %+v; want the lock key's and the queue prefix's", ws)
	}
	if ws := in.Warnings([]string{"svc/job"}); len(ws) != 0 {
		t.Errorf("Warnings with the lock declared = %+v; want none", ws)
	}
	if err := ValidateRulesValue(attrQueuePrefixes, "a//b"); err == nil || !strings.Contains(err.Error(), "queue_prefixes") {
		t.Fatalf("ValidateRulesValue(queue_prefixes, a//b) = %v; want an error naming queue_prefixes", err)
	}
}
