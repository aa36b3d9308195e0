package runner

import (
	"bufio"
	"bytes"
	"io"
	"slices"
	"strings"
	"testing"
)

// The guard's arguments read back as written, a command whose own
// arguments look like the guard's flags included.
func TestGuardArgs_roundTrip(t *testing.T) {
	for _, tc := range []struct {
		ownGroup bool
		path     string
		argv     []string
	}{
		{true, "/bin/sh", []string{"sh", "-c", "exit 0"}},
		{false, "./job", []string{"./job", "-group", "--", ""}},
	} {
		args := guardArgs(tc.ownGroup, tc.path, tc.argv)
		if args[0] != GuardCommand {
			t.Fatalf("args %q do not start with %s", args, GuardCommand)
		}
		ownGroup, path, argv, err := parseGuardArgs(args[1:])
		if err != nil || ownGroup != tc.ownGroup || path != tc.path || !slices.Equal(argv, tc.argv) {
			t.Fatalf("parse(%q) = %v %q %q %v, want %v %q %q", args, ownGroup, path, argv, err, tc.ownGroup, tc.path, tc.argv)
		}
	}
	if _, _, _, err := parseGuardArgs([]string{"/bin/sh", "sh"}); err == nil {
		t.Fatal("arguments without -- were accepted")
	}
}

// Messages read back as written; a closed end reads as io.EOF, a torn or
// garbled line as an error.
func TestGuardMsg_readsWhatWasWritten(t *testing.T) {
	var buf bytes.Buffer
	for _, m := range []guardMsg{{msgStarted, 4242}, {msgExited, 256}, {msgSignal, 15}, {msgEnd, 0}} {
		if err := writeGuardMsg(&buf, m.kind, m.n); err != nil {
			t.Fatal(err)
		}
	}
	r := bufio.NewReader(&buf)
	for _, want := range []guardMsg{{msgStarted, 4242}, {msgExited, 256}, {msgSignal, 15}, {msgEnd, 0}} {
		if got, err := readGuardMsg(r); err != nil || got != want {
			t.Fatalf("read %+v %v, want %+v", got, err, want)
		}
	}
	if _, err := readGuardMsg(r); err != io.EOF {
		t.Fatalf("after the last message: %v, want io.EOF", err)
	}
	for _, bad := range []string{"exited 2", "exited x\n"} {
		if _, err := readGuardMsg(bufio.NewReader(strings.NewReader(bad))); err == nil || err == io.EOF {
			t.Fatalf("%q read without an error (%v)", bad, err)
		}
	}
}
