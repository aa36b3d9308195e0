package lockproto

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/store"
)

// Session is a Consul session as the protocols use it: a lock's holder,
// created by CreateSession (the runner and the public library call it)
// and ended by whoever created it (DestroySession). Release needs only ID, so a
// caller that kept just the ID (the ephemeral lock's Close) builds one.
type Session struct {
	ID string
	// Node is the node the session lives on, as Consul recorded it.
	Node string
	// Created is when the create request was sent: the earliest time the
	// server can have started the session's TTL clock.
	Created time.Time
}

// sessionCreateBody is the JSON body of PUT /v1/session/create for profile p.
// Every setting is written out, the durations as Go
// duration strings: the Go api omits a zero LockDelay and the server would
// then apply 15s, so "0s" must be sent. node "" leaves the node to the agent
// that answers, which is the agent's own node.
func sessionCreateBody(name, node string, p lockmodel.Profile) map[string]any {
	body := map[string]any{
		"Name":      name,
		"TTL":       lockmodel.ConsulDuration(p.TTL),
		"LockDelay": lockmodel.ConsulDuration(p.LockDelay),
		"Behavior":  string(p.Behavior),
		// An explicit empty list means "no node checks"; absent would mean
		// Consul's default [serfHealth].
		"NodeChecks": nonNil(p.NodeChecks),
	}
	if node != "" {
		body["Node"] = node
	}
	if len(p.ServiceChecks) > 0 {
		checks := make([]api.ServiceCheck, 0, len(p.ServiceChecks))
		for _, c := range p.ServiceChecks {
			checks = append(checks, api.ServiceCheck{ID: c.ID, Namespace: c.Namespace})
		}
		body["ServiceChecks"] = checks
	}
	return body
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// sessionMismatches compares the session Consul created with the profile it
// was created from and lists every difference. An empty result means the
// session is exactly what was declared.
func sessionMismatches(e *api.SessionEntry, p lockmodel.Profile) []string {
	var out []string
	ttl, err := lockmodel.ParseConsulTTL(e.TTL)
	switch {
	case err != nil:
		out = append(out, err.Error())
	case ttl != p.TTL:
		out = append(out, fmt.Sprintf("ttl is %q, declared %q", lockmodel.FormatDuration(ttl), lockmodel.FormatDuration(p.TTL)))
	}
	if want := min(p.LockDelay, lockmodel.MaxLockDelay); e.LockDelay != want {
		out = append(out, fmt.Sprintf("lock_delay is %q, declared %q", lockmodel.FormatDuration(e.LockDelay), lockmodel.FormatDuration(want)))
	}
	behavior := e.Behavior
	if behavior == "" {
		behavior = string(lockmodel.BehaviorRelease)
	}
	if behavior != string(p.Behavior) {
		out = append(out, fmt.Sprintf("behavior is %q, declared %q", behavior, p.Behavior))
	}
	nodeChecks, serviceChecks := store.SessionChecks(e)
	if !sameSet(nodeChecks, p.NodeChecks) {
		out = append(out, fmt.Sprintf("node checks are %q, declared %q", nodeChecks, nonNil(p.NodeChecks)))
	}
	declaredSvc := []string{}
	for _, c := range p.ServiceChecks {
		declaredSvc = append(declaredSvc, c.ID)
	}
	if !sameSet(serviceChecks, declaredSvc) {
		out = append(out, fmt.Sprintf("service checks are %q, declared %q", serviceChecks, declaredSvc))
	}
	return out
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

// CreateSession creates the session from profile p and reads it back
// consistently to learn its node and to check that Consul applied every
// setting as declared. A session that differs is destroyed and reported.
func CreateSession(ctx context.Context, c *consul.Client, name, node string, p lockmodel.Profile) (*Session, error) {
	var out struct{ ID string }
	sent := time.Now()
	body := sessionCreateBody(name, node, p)
	if _, err := c.Raw().Write("/v1/session/create", body, &out, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
		where := "the agent's node"
		if node != "" {
			where = fmt.Sprintf("node %q", node)
		}
		return nil, c.Classify(ctx, "create a session on "+where, err)
	}
	if out.ID == "" {
		return nil, fmt.Errorf("create a session: Consul answered without a session ID")
	}
	s := &Session{ID: out.ID, Created: sent}
	entry, meta, err := c.Session().Info(out.ID, (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
	if err != nil {
		_ = DestroySession(context.WithoutCancel(ctx), c, s.ID)
		return nil, c.Classify(ctx, "read back the new session "+out.ID, err)
	}
	if entry == nil {
		_ = DestroySession(context.WithoutCancel(ctx), c, s.ID)
		if meta.ResultsFilteredByACLs {
			return nil, fmt.Errorf("read back the new session %s: Consul hid it from the token, which needs session read "+
				"on the session's node (session or session_prefix write on the node grants it)", out.ID)
		}
		return nil, fmt.Errorf("read back the new session %s: it ended right after it was created", out.ID)
	}
	if diffs := sessionMismatches(entry, p); len(diffs) > 0 {
		_ = DestroySession(context.WithoutCancel(ctx), c, s.ID)
		return nil, fmt.Errorf("session %s as created by Consul differs from profile %q: %s; the session was destroyed",
			out.ID, p.Name, strings.Join(diffs, "; "))
	}
	s.Node = entry.Node
	return s, nil
}

// DestroySession ends a session. A session that is already gone is not an
// error.
func DestroySession(ctx context.Context, c *consul.Client, id string) error {
	ctx, cancel := context.WithTimeout(ctx, CleanupTimeout)
	defer cancel()
	if _, err := c.Session().Destroy(id, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
		if consul.KindOf(err) == consul.KindNotFound {
			return nil
		}
		return consul.Classify("destroy session "+id, err)
	}
	return nil
}

// renewRetry is how soon a failed renewal is tried again; at most the
// renewal interval.
const renewRetry = 500 * time.Millisecond

// RenewLoop renews session id every interval until ctx is done or the
// session is gone, and reports every result on out. Renewals are spaced
// from their send times, so that the last confirmed contact is never older
// than every + timeout while Consul answers. Each request is bounded by
// timeout: a hung agent (a request that never answers) counts as a failed
// renewal like a refused one, and the loop's deadline timer, not an
// answer, decides when the lock is lost. A failed renewal is retried after
// renewRetry.
func RenewLoop(ctx context.Context, c *consul.Client, id string, every, timeout time.Duration, out chan<- Observation) {
	timer := time.NewTimer(every)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		sent := time.Now()
		rctx, cancel := context.WithTimeout(ctx, timeout)
		entry, err := c.RenewSession(rctx, id)
		cancel()
		if ctx.Err() != nil {
			return
		}
		var o Observation
		next := every - time.Since(sent)
		switch {
		case err != nil:
			e := consul.Classify("renew session "+id, err)
			o = Observation{Session: id, Kind: ObsRenewFailed, At: sent, Detail: e.Error(), Cause: refusalCause(e)}
			next = min(renewRetry, every)
		case entry == nil:
			o = Observation{Session: id, Kind: ObsSessionGone, At: sent, Detail: "session " + id}
		default:
			o = Observation{Session: id, Kind: ObsRenewed, At: sent}
		}
		select {
		case out <- o:
		case <-ctx.Done():
			return
		}
		if o.Kind == ObsSessionGone {
			return
		}
		timer.Reset(max(next, 0))
	}
}

// refusalCause is what a request Consul refused means for a holder: "the
// token lost session:write on web-1" for a 403 naming the permission,
// "the token is invalid or expired" for an unknown token; "" for any
// other error.
func refusalCause(e *consul.Error) string {
	switch {
	case e == nil:
		return ""
	case e.Kind == consul.KindPermissionDenied && e.Permission != "":
		return fmt.Sprintf("the token lost %s on %s", e.Permission, e.Resource)
	case e.Kind == consul.KindPermissionDenied:
		return "the token lost a permission (HTTP 403)"
	case e.Kind == consul.KindInvalidToken:
		return "the token is invalid or expired"
	}
	return ""
}

// sessionLockDelay returns the lock-delay of session id when the token may
// read it; ok is false otherwise.
func sessionLockDelay(ctx context.Context, c *consul.Client, id string) (time.Duration, bool) {
	entry, _, err := c.Session().Info(id, (&api.QueryOptions{AllowStale: true}).WithContext(ctx))
	if err != nil || entry == nil {
		return 0, false
	}
	return min(entry.LockDelay, lockmodel.MaxLockDelay), true
}
