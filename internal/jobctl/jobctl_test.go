package jobctl

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func testEnv(terminal bool) (env, *bytes.Buffer) {
	var out, errs bytes.Buffer
	return env{stdin: strings.NewReader(""), stdout: &out, stderr: &errs, isTerminal: func() bool { return terminal }, now: time.Now}, &errs
}

// Bad flags exit 2 before Consul is contacted, naming the flag; with
// -log-format json the message is one JSON event.
func TestBadFlagsNameTheFlag(t *testing.T) {
	for _, tc := range []struct {
		prog func(context.Context, []string, env) int
		args []string
		want string
	}{
		{Pause, []string{"-reason", "x"}, "-lock is required"},
		{Pause, []string{"-lock", "a", "-reason", " "}, "-reason: "},
		{Pause, []string{"-lock", "a", "-reason", "two\nlines"}, "one line"},
		{Resume, []string{"-lock", "a/b"}, "-lock: "},
		{Release, []string{"-lock", "a", "-reason", "x", "-session", "nope", "-yes"}, "-session \"nope\""},
		{Release, []string{"-lock", "a"}, "-reason: "},
	} {
		e, errs := testEnv(true)
		if code := tc.prog(context.Background(), tc.args, e); code != ExitUsage || !strings.Contains(errs.String(), tc.want) || !strings.Contains(errs.String(), "nothing was written") {
			t.Errorf("%v: exit %d, stderr %q; want 2 naming %q", tc.args, code, errs.String(), tc.want)
		}
	}
	e, errs := testEnv(true)
	if code := Pause(context.Background(), []string{"-log-format", "json", "-lock", "a", "-reason", ""}, e); code != ExitUsage {
		t.Fatalf("exit %d", code)
	}
	var ev map[string]any
	err := json.Unmarshal(errs.Bytes(), &ev)
	msg, _ := ev["msg"].(string)
	if err != nil || ev["level"] != "ERROR" || !strings.Contains(msg, "-reason: ") {
		t.Fatalf("json stderr %q: %v", errs.String(), err)
	}
}

// release refuses without -yes when stdin is not a terminal, before
// Consul is contacted.
func TestRelease_refusesWithoutYesOffTerminal(t *testing.T) {
	e, errs := testEnv(false)
	if code := Release(context.Background(), []string{"-lock", "a", "-reason", "stuck"}, e); code != ExitRefused || !strings.Contains(errs.String(), "without -yes") {
		t.Fatalf("exit %d, stderr %q", code, errs.String())
	}
}
