package runonce

import (
	"context"
	"errors"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/store"
)

// The ledger writes made without the lock, by a writer whose change holds
// whatever the holder does: a run_once.overlap skip or replace (the
// runner) and an operator's release (consullock release). Each reads the
// ledger consistently, decides (ledger's Skip, Replace, Release) and
// writes with a check-and-set, deciding again after another writer's
// change, at most LedgerTries times (store.EditLedger).

// Skip records run r.ID skipped on node because run other holds the lock
// (run_once.overlap skip). written is false when the run was begun or
// recorded meanwhile; err joins the write's error and the decision's.
func (r Run) Skip(ctx context.Context, registry, node, other string) (written bool, err error) {
	var skipErr error
	written, err = store.New(r.Client).EditLedger(ctx, registry, r.Lock, LedgerTries, func(l ledger.Ledger) (ledger.Ledger, bool) {
		out, changed, err := l.Skip(r.ID, node, other, r.now())
		skipErr = err
		return out.Prune(r.Keep, r.ID), changed && err == nil
	})
	return written, errors.Join(err, skipErr)
}

// Replace records the attempt that session runs replaced by run r.ID, as
// of at (run_once.overlap replace, once session was ended): the replaced
// run and attempt. written is false when no attempt of session was
// running any more (it finished first).
func (r Run) Replace(ctx context.Context, registry, session string, at time.Time) (written bool, run string, attempt int, err error) {
	written, err = store.New(r.Client).EditLedger(ctx, registry, r.Lock, LedgerTries, func(l ledger.Ledger) (ledger.Ledger, bool) {
		out, id, n, found := l.Replace(session, r.ID, at)
		run, attempt = id, n
		return out, found
	})
	return written, run, attempt, err
}

// Released is an operator's release of a held lock (consullock release).
type Released struct {
	// Session is the ended holder's session; By, Accessor and Reason who
	// released it (the token's accessor) and why; At when.
	Session, By, Accessor, Reason string
	At                            time.Time
}

// RecordRelease marks the attempt rel.Session was running on lock
// released: the run and attempt. written is false when the ledger had no
// attempt running under the session (the holder had not begun one, or
// the next holder recorded it).
func RecordRelease(ctx context.Context, c *consul.Client, registry, lock string, rel Released) (written bool, run string, attempt int, err error) {
	written, err = store.New(c).EditLedger(ctx, registry, lock, LedgerTries, func(l ledger.Ledger) (ledger.Ledger, bool) {
		out, id, n, found := l.Release(rel.Session, rel.By, rel.Reason, rel.At)
		if found {
			setReleasedByAccessor(out, id, n, rel.Accessor)
		}
		run, attempt = id, n
		return out, found
	})
	return written, run, attempt, err
}

// setReleasedByAccessor names the releasing token's accessor on the
// attempt the release recorded.
func setReleasedByAccessor(l ledger.Ledger, run string, attempt int, accessor string) {
	for i := range l.Runs {
		if r := &l.Runs[i]; r.ID == run && attempt >= 1 && attempt <= len(r.Attempts) {
			r.Attempts[attempt-1].ReleasedByAccessor = accessor
		}
	}
}
