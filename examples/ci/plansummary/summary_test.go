package main

import (
	"bytes"
	"strings"
	"testing"
)

// Plans the quickstart test does not produce, in the plan JSON format.

func summarize(t *testing.T, planJSON string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := run([]string{"-max-bytes", "0"}, strings.NewReader(planJSON), &out, &errOut); code != 0 {
		t.Fatalf("plansummary exited %d: %s", code, errOut.String())
	}
	return out.String()
}

func TestSummary_replaceShowsWhyAndForceDestroy(t *testing.T) {
	s := summarize(t, `{"format_version":"1.2","terraform_version":"1.10.6","resource_changes":[
	 {"address":"consullock_lock.pool","mode":"managed","type":"consullock_lock","name":"pool",
	  "change":{"actions":["delete","create"],
	   "before":{"name":"pool","key":"jobs/pool/.lock","limit":1,"flags":"0x2ddccbc058a50c18","force_destroy":false},
	   "after":{"name":"pool","key":"jobs/pool/.lock","limit":4,"flags":"0xe0f69a2baa414de0","force_destroy":false},
	   "after_unknown":{},"before_sensitive":{},"after_sensitive":{},
	   "replace_paths":[["limit"]]}}]}`)
	assertContains(t, s,
		": 1 to add, 0 to change, 1 to destroy",
		"| `-/+` replace | 1 | `consullock_lock.pool` |",
		"Replaced because `limit` cannot change in place.",
		"| **limit** | `1` (mutex) | `4` (semaphore) |",
		"| **flags** | `0x2ddccbc058a50c18` (api.Lock) | `0xe0f69a2baa414de0` (api.Semaphore) |",
		"| key | `jobs/pool/.lock` | _(unchanged)_ |",
		"`force_destroy = false`: the apply fails, naming the holder, if the lock is held",
	)
}

func TestSummary_neverShowsSensitiveValues(t *testing.T) {
	s := summarize(t, `{"format_version":"1.2","resource_changes":[
	 {"address":"consullock_acl_token.t","mode":"managed","type":"consullock_acl_token","name":"t",
	  "change":{"actions":["delete","create"],
	   "before":{"description":"desc-before-x","policies":["p"],"local":false,"secret_id":"s3cr3t-before","accessor_id":"a1"},
	   "after":{"description":"desc-after-x","policies":["p"],"local":true,"secret_id":"s3cr3t-after"},
	   "after_unknown":{"accessor_id":true},
	   "before_sensitive":{"secret_id":true,"description":true},"after_sensitive":{"secret_id":true,"description":true}}},
	 {"address":"consullock_acl_policy.p","mode":"managed","type":"consullock_acl_policy","name":"p",
	  "change":{"actions":["update"],
	   "before":{"name":"p","rules":"key \"a\" {\n  policy = \"write\"\n}\n"},
	   "after":{"name":"p","rules":"key \"b\" {\n  policy = \"write\"\n}\n"},
	   "after_unknown":{},"before_sensitive":true,"after_sensitive":true}}]}`)
	for _, secret := range []string{"s3cr3t", "desc-before-x", "desc-after-x", `key \"a\"`, `key "a"`, `key "b"`} {
		if strings.Contains(s, secret) {
			t.Errorf("summary shows sensitive %q:\n%s", secret, s)
		}
	}
	assertContains(t, s, "| **description** | _(sensitive)_ | _(sensitive)_ |", "ACL rules: _(sensitive)_", "| **local** | `false` | `true` |")
}

func TestSummary_unknownRulesAndDeletes(t *testing.T) {
	s := summarize(t, `{"format_version":"1.2","resource_changes":[
	 {"address":"module.jobs.consullock_acl_policy.p","mode":"managed","type":"consullock_acl_policy","name":"p",
	  "change":{"actions":["create"],"before":null,"after":{"name":"p","lock_keys":["x/.lock"]},
	   "after_unknown":{"rules":true,"id":true,"read_keys":[false,true]},"before_sensitive":false,"after_sensitive":{}}},
	 {"address":"consullock_session_defaults.old","mode":"managed","type":"consullock_session_defaults","name":"old",
	  "change":{"actions":["delete"],"before":{"name":"old","ttl":"15s","worst_case_gap":"45s"},"after":null,
	   "after_unknown":{},"before_sensitive":{},"after_sensitive":false}},
	 {"address":"null_resource.x","mode":"managed","type":"null_resource","name":"x",
	  "change":{"actions":["no-op"],"before":{},"after":{},"after_unknown":{}}}]}`)
	assertContains(t, s,
		": 1 to add, 0 to change, 1 to destroy",
		"| `+` create | 1 | `module.jobs.consullock_acl_policy.p` |",
		"| `-` destroy | 1 | `consullock_session_defaults.old` |",
		"| unchanged | 1 | |",
		"ACL rules: _(known after apply)_",
		"| read_keys | _(known after apply)_ |",
		"| worst_case_gap | `45s` |",
	)
}

func TestSummary_noChanges(t *testing.T) {
	s := summarize(t, `{"format_version":"1.2","resource_changes":[]}`)
	assertContains(t, s, "## OpenTofu plan: no changes")
}

func TestRun_rejectsPlanLog(t *testing.T) {
	var out, errOut bytes.Buffer
	log := `{"@level":"info","@message":"OpenTofu 1.10.6","type":"version"}`
	if code := run(nil, strings.NewReader(log), &out, &errOut); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	assertContains(t, errOut.String(), "not a plan JSON")
}

func TestDiffLines(t *testing.T) {
	got := strings.Join(diffLines([]string{"a", "b", "c"}, []string{"a", "x", "c", "d"}), "|")
	if want := " a|-b|+x| c|+d"; got != want {
		t.Fatalf("diff = %q, want %q", got, want)
	}
}

func TestTruncate_closesCodeBlock(t *testing.T) {
	s := "## t\n\n```diff\n" + strings.Repeat("+line\n", 1000) + "```\n"
	got := truncate(s, 500)
	if len(got) > 500 {
		t.Fatalf("len %d > 500", len(got))
	}
	if strings.Count(got, "```")%2 != 0 {
		t.Fatalf("open code block:\n%s", got)
	}
	assertContains(t, got, "Summary cut to fit")
}
