// Package faults is the fault-injection harness for consullock: a guarded
// store that applies the fencing rule (reject a write whose token is lower
// than the highest accepted) to the fencing token `consullock run` gives
// its child (CONSUL_LOCK_FENCING_TOKEN, the Raft index of the acquisition),
// checkers that read the store's log, and (in
// the tests) workers running `consullock run` under injected faults.
//
// The store and the checkers are plain Go with no Consul import, so that the
// checkers can be unit-tested on hand-written logs.
//
// The nemesis's faults (TestNemesis) are one type each, a Fault in a
// fault_*_test.go file of its own (its name, weight, targets, draw and
// injection), listed once in the registry nemesisFaults, which the
// schedule, the injector and the summary read: a new fault is one file
// plus one line in nemesisFaults.
package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"
)

// EnvFencingToken is where `consullock run` puts the child's fencing token.
// The store fences on it, not on CONSUL_LOCK_INDEX: LockIndex restarts at 1
// when the key is deleted and created again and drops to 0 after a plain
// write, and a store that kept the highest LockIndex would then refuse
// every later holder.
const EnvFencingToken = "CONSUL_LOCK_FENCING_TOKEN"

// TokenFromEnv is the fencing token the child was given.
func TokenFromEnv() (uint64, error) {
	v := os.Getenv(EnvFencingToken)
	token, err := strconv.ParseUint(v, 10, 64)
	if err != nil || token == 0 {
		return 0, fmt.Errorf("%s=%q: want the positive fencing token consullock run sets", EnvFencingToken, v)
	}
	return token, nil
}

// Write kinds. A child writes KindStart when it begins its work, KindEnd
// when it finished it, KindAbort when it was told to stop (SIGTERM). The
// harness writes KindFault when it injects a fault; fault marks are not
// subject to fencing.
const (
	KindStart = "start"
	KindEnd   = "end"
	KindAbort = "abort"
	KindFault = "fault"
)

// Write is one entry of the store's log.
type Write struct {
	Seq       int       `json:"seq"`
	At        time.Time `json:"at"` // when the store decided (one clock for all writers)
	Kind      string    `json:"kind"`
	Worker    string    `json:"worker"`
	Run       string    `json:"run"`   // one child execution
	Token     uint64    `json:"token"` // the writer's fencing token (EnvFencingToken)
	Session   string    `json:"session,omitempty"`
	PID       int       `json:"pid,omitempty"`
	RunnerPID int       `json:"runner_pid,omitempty"`
	Note      string    `json:"note,omitempty"`
	Accepted  bool      `json:"accepted"`
	Highest   uint64    `json:"highest"` // highest accepted token before this write
}

// Store is the guarded resource of the fencing pattern: it accepts a write
// only if its token is at least the highest token accepted so far, and logs
// every write, accepted or not.
type Store struct {
	mu      sync.Mutex
	highest uint64
	log     []Write
	changed chan struct{} // closed and replaced on every log entry

	srv *http.Server
	ln  net.Listener
	// resolve, when set, rewrites a writer's write before it is decided
	// (SetResolve).
	resolve func(*Write)
}

// NewStore serves a store over HTTP on addr ("127.0.0.1:0" for any port).
func NewStore(addr string) (*Store, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &Store{changed: make(chan struct{}), ln: ln}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /write", s.handleWrite)
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// URL is the store's base URL.
func (s *Store) URL() string { return "http://" + s.ln.Addr().String() }

// Close stops serving.
func (s *Store) Close() { _ = s.srv.Close() }

// SetResolve makes the store pass each writer's write (not a fault mark)
// to resolve before deciding it: the harness translates there the PIDs a
// child in a PID namespace reports into the host's.
func (s *Store) SetResolve(resolve func(*Write)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resolve = resolve
}

// Apply decides a write by the fencing rule, logs it and returns it as
// logged.
func (s *Store) Apply(w Write) Write {
	s.mu.Lock()
	resolve := s.resolve
	s.mu.Unlock()
	if resolve != nil && w.Kind != KindFault {
		resolve(&w)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	w.Seq, w.At, w.Highest = len(s.log), time.Now(), s.highest
	if w.Kind == KindFault {
		w.Accepted = true
	} else {
		w.Accepted = w.Token >= s.highest
		if w.Accepted {
			s.highest = w.Token
		}
	}
	s.log = append(s.log, w)
	close(s.changed)
	s.changed = make(chan struct{})
	return w
}

// Mark logs a fault injected by the harness.
func (s *Store) Mark(worker, note string) Write {
	return s.Apply(Write{Kind: KindFault, Worker: worker, Note: note})
}

// Highest is the highest accepted token.
func (s *Store) Highest() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.highest
}

// Log returns a copy of the log.
func (s *Store) Log() []Write {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Write(nil), s.log...)
}

// WaitFor waits until cond holds for the log, or ctx ends. It wakes on
// every new entry; it never polls.
func (s *Store) WaitFor(ctx context.Context, cond func([]Write) bool) ([]Write, error) {
	for {
		s.mu.Lock()
		log, changed := append([]Write(nil), s.log...), s.changed
		s.mu.Unlock()
		if cond(log) {
			return log, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return log, ctx.Err()
		}
	}
}

func (s *Store) handleWrite(w http.ResponseWriter, r *http.Request) {
	var in Write
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&in); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if in.Kind != KindStart && in.Kind != KindEnd && in.Kind != KindAbort {
		http.Error(w, "unknown kind "+in.Kind, http.StatusBadRequest)
		return
	}
	out := s.Apply(in)
	w.Header().Set("Content-Type", "application/json")
	if !out.Accepted {
		w.WriteHeader(http.StatusConflict)
	}
	_ = json.NewEncoder(w).Encode(out)
}

// ErrFenced is returned by Post when the store rejected the write: a
// higher token has been accepted, so the writer no longer holds the lock.
var ErrFenced = errors.New("write rejected: a higher fencing token has been accepted")

// Post sends w to the store at baseURL.
func Post(ctx context.Context, client *http.Client, baseURL string, w Write) error {
	body, err := json.Marshal(w)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+"/write", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	switch resp.StatusCode {
	case http.StatusOK:
		return nil
	case http.StatusConflict:
		return ErrFenced
	default:
		return fmt.Errorf("store answered %s", resp.Status)
	}
}
