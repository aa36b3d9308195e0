package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestUnknownCommandPrintsUsageAndExits2(t *testing.T) {
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"frobnicate"}, &stderr)
	if code != 2 {
		t.Fatalf("exit code = %d, want 2", code)
	}
	if !strings.Contains(stderr.String(), `unknown command "frobnicate"`) || !strings.Contains(stderr.String(), "Usage:") {
		t.Fatalf("stderr does not explain: %q", stderr.String())
	}
}

func TestUsageListsOnlyRegisteredCommands(t *testing.T) {
	var out bytes.Buffer
	usage(&out)
	for _, line := range strings.Split(out.String(), "\n") {
		fields := strings.Fields(line)
		if len(fields) >= 2 && fields[0] == "consullock" && !strings.HasPrefix(fields[1], "-") && !strings.HasPrefix(fields[1], "[") {
			if _, ok := commands[fields[1]]; !ok {
				t.Fatalf("usage lists %q, which is not a registered command", fields[1])
			}
		}
	}
}

func TestBadFlagExits2(t *testing.T) {
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"-no-such-flag"}, &stderr); code != 2 {
		t.Fatalf("exit code = %d, want 2", code)
	}
}
