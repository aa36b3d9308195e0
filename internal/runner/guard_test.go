package runner

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
)

// The start message reads back as written, a command whose arguments and
// environment hold newlines and NULs included; a torn one is an error.
func TestGuardStart_readsWhatWasWritten(t *testing.T) {
	want := guardStart{Path: "/bin/sh", Argv: []string{"sh", "-c", "echo 'a\nb'", "start 3", "\x00"}, Env: []string{"A=1\n2", "B="}, OwnGroup: true}
	var buf bytes.Buffer
	if err := writeGuardStart(&buf, want); err != nil {
		t.Fatal(err)
	}
	if err := writeGuardMsg(&buf, msgSignal, 15); err != nil {
		t.Fatal(err)
	}
	whole := buf.String()
	r := bufio.NewReader(&buf)
	got, err := readGuardStart(r)
	if err != nil || got.Path != want.Path || !slices.Equal(got.Argv, want.Argv) || !slices.Equal(got.Env, want.Env) || got.OwnGroup != want.OwnGroup {
		t.Fatalf("read %+v %v, want %+v", got, err, want)
	}
	if m, err := readGuardMsg(r); err != nil || m != (guardMsg{msgSignal, 15}) {
		t.Fatalf("the message after the start: %+v %v", m, err)
	}
	torn := whole[:len(whole)/2]
	if _, err := readGuardStart(bufio.NewReader(strings.NewReader(torn))); err == nil {
		t.Fatalf("a torn start %q was read", torn)
	}
	if _, err := readGuardStart(bufio.NewReader(strings.NewReader(""))); !errors.Is(err, io.EOF) {
		t.Fatalf("no start: %v, want io.EOF (the runner went away)", err)
	}
}

// Messages read back as written; a closed end reads as io.EOF, a torn or
// garbled line as an error.
func TestGuardMsg_readsWhatWasWritten(t *testing.T) {
	var buf bytes.Buffer
	for _, m := range []guardMsg{{msgStarted, 4242}, {msgExited, 256}, {msgSignal, 15}, {msgKillBy, 1 << 40}, {msgEnd, 0}} {
		if err := writeGuardMsg(&buf, m.kind, m.n); err != nil {
			t.Fatal(err)
		}
	}
	r := bufio.NewReader(&buf)
	for _, want := range []guardMsg{{msgStarted, 4242}, {msgExited, 256}, {msgSignal, 15}, {msgKillBy, 1 << 40}, {msgEnd, 0}} {
		if got, err := readGuardMsg(r); err != nil || got != want {
			t.Fatalf("read %+v %v, want %+v", got, err, want)
		}
	}
	if _, err := readGuardMsg(r); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last message: %v, want io.EOF", err)
	}
	for _, bad := range []string{"exited 2", "exited x\n"} {
		if _, err := readGuardMsg(bufio.NewReader(strings.NewReader(bad))); err == nil || errors.Is(err, io.EOF) {
			t.Fatalf("%q read without an error (%v)", bad, err)
		}
	}
}
