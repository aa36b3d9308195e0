package faults

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/runner"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// childEnv makes the test binary act as the worker's child (childMain)
// instead of running tests; the runner passes its environment on.
const (
	childEnv  = "CONSULLOCK_FAULTS_CHILD"
	storeEnv  = "CONSULLOCK_FAULTS_STORE"
	workerEnv = "CONSULLOCK_FAULTS_WORKER"
)

// Child exit codes.
const (
	childFenced   = 3 // the store rejected a write
	childNoStore  = 4 // the store could not be reached
	childTermed   = 143
	childBadUsage = 99
)

var (
	agent     *testenv.Agent
	runnerBin string // the consullock binary, built once
	childBin  string // this test binary, run as the child
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(childMain(os.Args[1:]))
	}
	flag.Parse()
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	var err error
	if childBin, err = os.Executable(); err != nil {
		fmt.Fprintln(os.Stderr, "faults tests:", err)
		return 1
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults tests:", err)
		return 1
	}
	runnerBin = filepath.Join(root, "tmp", "consullock-faults")
	if err := testenv.BuildConsullock(context.Background(), runnerBin); err != nil {
		fmt.Fprintln(os.Stderr, "faults tests: building consullock:", err)
		return 1
	}
	if agent, err = testenv.Start(context.Background(), testenv.Options{}); err != nil {
		fmt.Fprintln(os.Stderr, "faults tests: starting Consul:", err)
		return 1
	}
	defer agent.Stop()
	code := m.Run()
	stopSharedCluster(code != 0)
	return code
}

// childMain is the job run under the lock: it writes "start" to the store
// with its fencing token (CONSUL_LOCK_FENCING_TOKEN), works for -work, and writes
// "end". A rejected write ends it at once with childFenced. On SIGTERM it
// writes "abort" and exits 143.
func childMain(args []string) int {
	fs := flag.NewFlagSet("child", flag.ContinueOnError)
	work := fs.Duration("work", 200*time.Millisecond, "how long the job works")
	if err := fs.Parse(args); err != nil {
		return childBadUsage
	}
	terms := make(chan os.Signal, 1)
	signal.Notify(terms, syscall.SIGTERM)
	token, err := TokenFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return childBadUsage
	}
	base := Write{
		Worker: os.Getenv(workerEnv), Token: token, Session: os.Getenv("CONSUL_LOCK_SESSION"),
		PID: os.Getpid(), RunnerPID: runnerPID(),
	}
	base.Run = fmt.Sprintf("%s-%d-%d", base.Worker, base.PID, time.Now().UnixNano())
	client := &http.Client{Timeout: 10 * time.Second}
	url := os.Getenv(storeEnv)
	write := func(kind string) int {
		w := base
		w.Kind = kind
		err := Post(context.Background(), client, url, w)
		switch {
		case err == nil:
			return 0
		case errors.Is(err, ErrFenced):
			fmt.Fprintf(os.Stderr, "child: %s write with token %d rejected (fenced)\n", kind, token)
			return childFenced
		default:
			fmt.Fprintf(os.Stderr, "child: %s write: %v\n", kind, err)
			return childNoStore
		}
	}
	if code := write(KindStart); code != 0 {
		return code
	}
	done := time.NewTimer(*work)
	select {
	case <-done.C:
		return write(KindEnd)
	case <-terms:
		if code := write(KindAbort); code != 0 {
			return code
		}
		return childTermed
	}
}

// runnerPID is the pid of the runner that runs this child: its parent, or
// on Linux its parent's parent, when the parent is the runner's guard
// (runner.GuardCommand).
func runnerPID() int {
	ppid := os.Getppid()
	cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(ppid) + "/cmdline")
	if args := strings.Split(string(cmdline), "\x00"); len(args) < 2 || args[1] != runner.GuardCommand {
		return ppid
	}
	stat, _ := os.ReadFile("/proc/" + strconv.Itoa(ppid) + "/stat")
	if i := strings.LastIndexByte(string(stat), ')'); i >= 0 {
		if f := strings.Fields(string(stat[i+1:])); len(f) > 1 {
			if n, err := strconv.Atoi(f[1]); err == nil {
				return n
			}
		}
	}
	return ppid
}
