package logformat

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"strings"
	"testing"
)

// Every program's -log-format: text is log/slog's key=value, json its JSON
// handler, with the same keys (time, level, msg, then the attributes);
// anything else is a usage error naming the flag.
func TestLogFormat(t *testing.T) {
	parse := func(args ...string) (Format, error) {
		fs := flag.NewFlagSet("p", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var f Format
		Var(fs, &f, JSON)
		return f, fs.Parse(args)
	}
	if f, err := parse(); err != nil || f != JSON {
		t.Fatalf("default: %q, %v; want json", f, err)
	}
	if f, err := parse("-log-format", "text"); err != nil || f != Text {
		t.Fatalf("-log-format text: %q, %v", f, err)
	}
	if _, err := parse("-log-format", "xml"); err == nil || !strings.Contains(err.Error(), "log-format") || !strings.Contains(err.Error(), "text or json") {
		t.Fatalf("-log-format xml: %v; want an error naming the flag and its values", err)
	}

	var out bytes.Buffer
	New(&out, JSON, slog.LevelInfo).Info("lock acquired", "lock", "nightly", "fencing_token", 42)
	New(&out, JSON, slog.LevelInfo).Debug("not shown")
	var event map[string]any
	if err := json.Unmarshal(out.Bytes(), &event); err != nil {
		t.Fatalf("json: %v: %s", err, out.String())
	}
	for _, k := range []string{"time", "level", "msg", "lock", "fencing_token"} {
		if _, ok := event[k]; !ok {
			t.Errorf("json event lacks %q: %s", k, out.String())
		}
	}
	out.Reset()
	New(&out, Text, slog.LevelInfo).Info("lock acquired", "lock", "nightly")
	if s := out.String(); !strings.HasPrefix(s, "time=") || !strings.Contains(s, `level=INFO msg="lock acquired" lock=nightly`) {
		t.Errorf("text event: %s", s)
	}
}

// Messages for a person (status's diagnostics) become one JSON event per
// line in json, and stay as they are in text.
func TestMessages(t *testing.T) {
	var out bytes.Buffer
	w := Messages(&out, JSON, "status: ")
	_, _ = io.WriteString(w, "status: Consul Unreachable: connection refused.\nsecond line\n")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d events, want 2: %s", len(lines), out.String())
	}
	var event map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &event); err != nil || event["level"] != "ERROR" || event["msg"] != "Consul Unreachable: connection refused." {
		t.Errorf("event %v (%v): %s", event, err, lines[0])
	}
	out.Reset()
	_, _ = io.WriteString(Messages(&out, Text, "status: "), "status: as is\n")
	if out.String() != "status: as is\n" {
		t.Errorf("text: %q", out.String())
	}
}
