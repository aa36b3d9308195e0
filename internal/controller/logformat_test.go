package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// -log-format: the controller logs JSON by default and key=value text with
// -log-format text, the same events with the same keys.
func TestRun_logFormat(t *testing.T) {
	t.Setenv("CONSUL_HTTP_SSL", "not-a-boolean") // fails at once, after the logger is set up
	var out bytes.Buffer
	if code := run(context.Background(), []string{"-log-format", "text", "-listen", ""}, &out); code != 2 {
		t.Fatalf("exit %d, want 2: %s", code, out.String())
	}
	if s := out.String(); !strings.HasPrefix(s, "time=") || !strings.Contains(s, `level=ERROR msg="reading the Consul environment failed"`) {
		t.Errorf("-log-format text: %s", s)
	}
	out.Reset()
	if code := run(context.Background(), []string{"-listen", ""}, &out); code != 2 {
		t.Fatalf("exit %d, want 2: %s", code, out.String())
	}
	var event map[string]any
	if err := json.Unmarshal(out.Bytes(), &event); err != nil || event["msg"] != "reading the Consul environment failed" || event["level"] != "ERROR" || event["time"] == nil {
		t.Errorf("default json: %v (%v): %s", event, err, out.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"-log-format", "xml"}, &out); code != 2 || !strings.Contains(out.String(), "-log-format") {
		t.Errorf("-log-format xml: exit %d, %s", code, out.String())
	}
}
