package status

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
)

// update is one answer of a blocking query: how to apply it to the world,
// or the error it failed with.
type update struct {
	source string // "registry", "sessions" or a list prefix
	gen    int    // the list loop's generation; stale ones are dropped
	apply  func(*world)
	err    error
}

// fetch is one query of a watch, with its follower's options, and how to
// apply its answer to the world.
type fetch func(o *api.QueryOptions) (func(*world), *api.QueryMeta, error)

// loop follows f (consul.Follow: Consul's index rule and the one back-off)
// until ctx ends, sending every change (not the timeouts of an unchanged
// wait) and every error to ch.
func loop(ctx context.Context, source string, gen int, f fetch, ch chan<- update) {
	fl := &consul.Follower{}
	_ = consul.Follow(ctx, fl, f, func(apply func(*world), err error) bool {
		if err == nil && !fl.Changed() {
			return true // the wait ended without a change
		}
		select {
		case ch <- update{source: source, gen: gen, apply: apply, err: err}:
			return true
		case <-ctx.Done():
			return false
		}
	})
}

// watch redraws whenever a blocking query reports a change: one on the
// registry, one on the sessions and one per list prefix (the same fixed
// number of queries as a single read).
func watch(ctx context.Context, r *reader, o options, stdout, stderr io.Writer) int {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	x := &watcher{ctx: ctx, r: r, o: o, stdout: stdout, stderr: stderr, ch: make(chan update),
		w:      &world{registry: r.registry, pairs: map[string][]*api.KVPair{}, sessions: nil},
		synced: map[string]bool{}, lists: map[string]context.CancelFunc{}, gens: map[string]int{},
		changed: map[string]time.Time{}, code: ExitOK}
	go loop(ctx, "registry", 0, func(o *api.QueryOptions) (func(*world), *api.QueryMeta, error) {
		d, meta, err := r.registryList(o)
		return func(w *world) { w.decl = d }, meta, err
	}, x.ch)
	go loop(ctx, "sessions", 0, func(o *api.QueryOptions) (func(*world), *api.QueryMeta, error) {
		raw, meta, err := r.sessionList(o)
		return func(w *world) { w.setSessions(raw) }, meta, err
	}, x.ch)
	for {
		u, ok := x.next()
		if !ok {
			return x.code
		}
		if code, stop := x.step(u); stop {
			return code
		}
	}
}

// watcher is the state of one -watch: the world its loops' answers built,
// which of them answered, the list loops by prefix, and what it drew last.
type watcher struct {
	ctx            context.Context
	r              *reader
	o              options
	stdout, stderr io.Writer
	ch             chan update

	w      *world
	synced map[string]bool               // the sources that answered
	lists  map[string]context.CancelFunc // the list loops, by prefix
	gens   map[string]int                // each list loop's generation
	gen    int                           // the last generation started
	// changed is when this program saw each lock's declaration change
	// (compliance.Pending); wake redraws when the apply grace of one ends.
	changed map[string]time.Time
	wake    <-chan time.Time
	last    []byte // the last frame drawn
	code    int    // its exit code
}

// next waits for the next update; false when ctx ended. The end of an
// apply grace is an update that changes nothing (source "grace").
func (x *watcher) next() (update, bool) {
	select {
	case <-x.ctx.Done():
		return update{}, false
	case u := <-x.ch:
		return u, true
	case <-x.wake:
		x.wake = nil
		return update{source: "grace", apply: func(*world) {}}, true
	}
}

// step applies u and, once every loop has answered, rebuilds the report
// and redraws it; stop when the program ends with code.
func (x *watcher) step(u update) (code int, stop bool) {
	if g, ok := x.gens[u.source]; u.source != "registry" && u.source != "sessions" && u.source != "grace" && (!ok || g != u.gen) {
		return 0, false // a list loop that was replaced
	}
	if u.err != nil {
		var ce *consul.Error
		if errors.As(u.err, &ce) && (ce.Kind == consul.KindPermissionDenied || ce.Kind == consul.KindInvalidToken) {
			return fail(x.stderr, u.err), true
		}
		fmt.Fprintf(x.stderr, "status: %v (retrying)\n", u.err)
		return 0, false
	}
	x.apply(u)
	if !x.ready() {
		return 0, false
	}
	rep, err := x.rebuild()
	if err != nil {
		fmt.Fprintf(x.stderr, "status: %v (retrying)\n", err)
		return 0, false
	}
	return x.redraw(rep)
}

// apply applies an answer to the world: a registry answer notes the
// declarations that changed (after the first) and resyncs the list loops.
func (x *watcher) apply(u update) {
	before, listed := x.w.decl.lockIndex, x.synced["registry"]
	u.apply(x.w)
	if u.source == "grace" {
		u.source = "registry" // nothing new: just redraw
	}
	x.synced[u.source] = true
	if u.source != "registry" {
		return
	}
	if listed {
		for name, idx := range x.w.decl.lockIndex {
			if old, ok := before[name]; !ok || old != idx {
				x.changed[name] = time.Now()
			}
		}
	}
	x.resyncLists()
}

// resyncLists starts a list loop for each prefix the declarations list
// and stops those of the prefixes they no longer list.
func (x *watcher) resyncLists() {
	var prefixes []string
	x.w.groups, prefixes = listPrefixes(x.w.decl)
	want := map[string]bool{}
	for _, p := range prefixes {
		want[p] = true
		if x.lists[p] != nil {
			continue
		}
		x.gen++
		lctx, lcancel := context.WithCancel(x.ctx)
		x.lists[p], x.gens[p] = lcancel, x.gen
		go loop(lctx, p, x.gen, func(o *api.QueryOptions) (func(*world), *api.QueryMeta, error) {
			pairs, meta, err := x.r.keyList(p, o)
			return func(w *world) { w.pairs[p] = pairs }, meta, err
		}, x.ch)
	}
	for p, stop := range x.lists {
		if !want[p] {
			stop()
			delete(x.lists, p)
			delete(x.gens, p)
			delete(x.w.pairs, p)
			delete(x.synced, p)
		}
	}
}

// ready is true once the registry, the sessions and every list loop have
// answered.
func (x *watcher) ready() bool {
	ready := x.synced["registry"] && x.synced["sessions"]
	for p := range x.lists {
		ready = ready && x.synced[p]
	}
	return ready
}

// rebuild builds the report of the world now, with the pending locks
// (pendingLocks), and sets wake to the end of the first apply grace.
func (x *watcher) rebuild() (*Report, error) {
	// Holder services are read afresh at each rebuild (not watched):
	// their health changes do not by themselves redraw the report.
	if err := x.r.readHolderServices(x.ctx, x.w); err != nil {
		return nil, err
	}
	now := time.Now()
	x.w.pending = nil
	rep := build(x.w, x.r.registry, x.o.alwaysHeld, now)
	pending, err := x.r.pendingLocks(x.ctx, x.w, rep, x.changed, now)
	if err != nil {
		return nil, err
	}
	if len(pending) > 0 {
		x.w.pending = pending
		rep = build(x.w, x.r.registry, x.o.alwaysHeld, now)
	}
	var next time.Time
	for name, at := range x.changed {
		if end := at.Add(applyGrace); !end.After(now) {
			delete(x.changed, name)
		} else if next.IsZero() || end.Before(next) {
			next = end
		}
	}
	if !next.IsZero() {
		x.wake = time.After(time.Until(next))
	}
	return rep, nil
}

// redraw prints rep when it differs from the last frame (clearing the
// terminal first, unless -json); stop on a usage error (-lock names no
// declared lock).
func (x *watcher) redraw(rep *Report) (code int, stop bool) {
	var buf bytes.Buffer
	x.code = show(rep, x.o, &buf, x.stderr)
	if x.code == ExitUsage {
		return x.code, true
	}
	if bytes.Equal(buf.Bytes(), x.last) {
		return 0, false
	}
	x.last = buf.Bytes()
	if !x.o.json {
		fmt.Fprint(x.stdout, "\x1b[H\x1b[2J") // clear the terminal, then redraw
	}
	_, _ = x.stdout.Write(buf.Bytes())
	return 0, false
}
