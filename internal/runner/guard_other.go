//go:build !linux

package runner

import (
	"fmt"
	"log/slog"
	"os"
	"time"
)

// guarded: no guard on this platform; the runner starts the command
// itself. On macOS the command leads its own process group (stdin not a
// terminal), which the runner signals and waits to be empty before it
// releases the lock; on the other platforms only the command itself is
// signalled. If the runner is killed (SIGKILL), the command and what it
// started run on: these platforms have neither a parent-death signal nor a
// subreaper.
const guarded = false

// guard does not exist here; a child never has one.
type guard struct{}

func prepareGuard() (*guard, error) { return nil, nil }

func (*guard) discardUnused() {}

func startGuarded(*guard, string, []string, []string, outputs, bool, time.Time, *slog.Logger) (*child, error) {
	return nil, fmt.Errorf("no guard on this platform")
}

func (*guard) signal(*child, os.Signal) error { return os.ErrProcessDone }

func (*guard) endTree(*slog.Logger) {}

func (*guard) killBy(time.Time) {}

func runGuard() int {
	fmt.Fprintln(os.Stderr, "consullock run guard: not available on this platform")
	return ExitUsage
}
