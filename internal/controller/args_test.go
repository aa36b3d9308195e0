package controller

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/compliance"
)

// Config.ApplyGrace means what -apply-grace means (the controller guide):
// 0 is none, and a negative grace is refused.
func TestNew_applyGraceZeroMeansNone(t *testing.T) {
	for _, grace := range []time.Duration{0, 2 * time.Second} {
		c, err := New(nil, Config{ApplyGrace: grace})
		if err != nil {
			t.Fatal(err)
		}
		if c.cfg.ApplyGrace != grace {
			t.Errorf("Config.ApplyGrace %s: the controller applies %s", grace, c.cfg.ApplyGrace)
		}
	}
	if _, err := New(nil, Config{ApplyGrace: -time.Second}); err == nil || !strings.Contains(err.Error(), "ApplyGrace") {
		t.Errorf("Config.ApplyGrace -1s: %v, want an error naming the apply grace", err)
	}
}

// -apply-grace: 5s by default, 0 is none (the controller guide's words),
// and the controller built from the flags applies what was given.
func TestParseArgs_applyGrace(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want time.Duration
	}{
		{nil, compliance.DefaultApplyGrace},
		{[]string{"-apply-grace", "0"}, 0},
		{[]string{"-apply-grace", "750ms"}, 750 * time.Millisecond},
	} {
		o, err := parseArgs(tc.args, io.Discard)
		if err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		c, err := New(nil, o.cfg)
		if err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		if c.cfg.ApplyGrace != tc.want {
			t.Errorf("%q: the controller applies %s, want %s", tc.args, c.cfg.ApplyGrace, tc.want)
		}
	}
}

// TestRun_badFlags: refused with exit 2 before Consul is contacted, the
// flag named with what is allowed.
func TestRun_badFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-apply-grace", "-1s"}, `controller: -apply-grace: "-1s" is not allowed; use 0 (none) or a positive duration`},
		{[]string{"-registry-prefix", "a b"}, `controller: -registry-prefix: "a b" is not allowed`},
		{[]string{"-mode", "fix"}, `controller: -mode: "fix" is not allowed`},
		{[]string{"-log-level", "loud"}, `controller: -log-level:`},
		{[]string{"extra"}, `controller: unexpected arguments ["extra"]`},
		{[]string{"-no-such-flag"}, `flag provided but not defined: -no-such-flag`},
	} {
		var stderr strings.Builder
		if code := run(context.Background(), tc.args, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("controller %q: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}
