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
	ch := make(chan update)
	w := &world{registry: r.registry, pairs: map[string][]*api.KVPair{}, sessions: nil}
	synced := map[string]bool{}
	lists := map[string]context.CancelFunc{}
	gens := map[string]int{}
	gen := 0
	go loop(ctx, "registry", 0, func(o *api.QueryOptions) (func(*world), *api.QueryMeta, error) {
		d, meta, err := r.registryList(o)
		return func(w *world) { w.decl = d }, meta, err
	}, ch)
	go loop(ctx, "sessions", 0, func(o *api.QueryOptions) (func(*world), *api.QueryMeta, error) {
		raw, meta, err := r.sessionList(o)
		return func(w *world) { w.setSessions(raw) }, meta, err
	}, ch)
	var last []byte
	code := ExitOK
	// changed is when this program saw each lock's declaration change
	// (compliance.Pending); wake redraws when the apply grace of one ends.
	changed := map[string]time.Time{}
	var wake <-chan time.Time
	for {
		var u update
		select {
		case <-ctx.Done():
			return code
		case u = <-ch:
		case <-wake:
			wake = nil
			u = update{source: "grace", apply: func(*world) {}}
		}
		if g, ok := gens[u.source]; u.source != "registry" && u.source != "sessions" && u.source != "grace" && (!ok || g != u.gen) {
			continue // a list loop that was replaced
		}
		if u.err != nil {
			var ce *consul.Error
			if errors.As(u.err, &ce) && (ce.Kind == consul.KindPermissionDenied || ce.Kind == consul.KindInvalidToken) {
				return fail(stderr, u.err)
			}
			fmt.Fprintf(stderr, "status: %v (retrying)\n", u.err)
			continue
		}
		before, listed := w.decl.lockIndex, synced["registry"]
		u.apply(w)
		if u.source == "grace" {
			u.source = "registry" // nothing new: just redraw
		}
		synced[u.source] = true
		if u.source == "registry" && listed {
			for name, idx := range w.decl.lockIndex {
				if old, ok := before[name]; !ok || old != idx {
					changed[name] = time.Now()
				}
			}
		}
		if u.source == "registry" {
			var prefixes []string
			w.groups, prefixes = listPrefixes(w.decl)
			want := map[string]bool{}
			for _, p := range prefixes {
				want[p] = true
				if lists[p] != nil {
					continue
				}
				gen++
				lctx, lcancel := context.WithCancel(ctx)
				lists[p], gens[p] = lcancel, gen
				go loop(lctx, p, gen, func(o *api.QueryOptions) (func(*world), *api.QueryMeta, error) {
					pairs, meta, err := r.keyList(p, o)
					return func(w *world) { w.pairs[p] = pairs }, meta, err
				}, ch)
			}
			for p, stop := range lists {
				if !want[p] {
					stop()
					delete(lists, p)
					delete(gens, p)
					delete(w.pairs, p)
					delete(synced, p)
				}
			}
		}
		ready := synced["registry"] && synced["sessions"]
		for p := range lists {
			ready = ready && synced[p]
		}
		if !ready {
			continue
		}
		// Holder services are read afresh at each rebuild (not watched):
		// their health changes do not by themselves redraw the report.
		if err := r.readHolderServices(ctx, w); err != nil {
			fmt.Fprintf(stderr, "status: %v (retrying)\n", err)
			continue
		}
		now := time.Now()
		w.pending = nil
		rep := build(w, r.registry, o.alwaysHeld, now)
		pending, err := r.pendingLocks(ctx, w, rep, changed, now)
		if err != nil {
			fmt.Fprintf(stderr, "status: %v (retrying)\n", err)
			continue
		}
		if len(pending) > 0 {
			w.pending = pending
			rep = build(w, r.registry, o.alwaysHeld, now)
		}
		var next time.Time
		for name, at := range changed {
			if end := at.Add(applyGrace); !end.After(now) {
				delete(changed, name)
			} else if next.IsZero() || end.Before(next) {
				next = end
			}
		}
		if !next.IsZero() {
			wake = time.After(time.Until(next))
		}
		var buf bytes.Buffer
		code = show(rep, o, &buf, stderr)
		if code == ExitUsage {
			return code
		}
		if bytes.Equal(buf.Bytes(), last) {
			continue
		}
		last = buf.Bytes()
		if !o.json {
			fmt.Fprint(stdout, "\x1b[H\x1b[2J") // clear the terminal, then redraw
		}
		_, _ = stdout.Write(buf.Bytes())
	}
}
