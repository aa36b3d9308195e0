package store

import (
	"context"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"

	"github.com/consullock/terraform-provider-consullock/internal/record"
)

// Pause records (record.Pause) at <registry>/pauses/<lock>: written by
// `consullock pause` and the provider (consullock_lock.paused), read by
// runners and status.

// ReadPause reads lock's pause record consistently: nil when the lock is
// not paused. index is the record's ModifyIndex (0 when absent), for a
// check-and-set write or delete.
func (r *Registry) ReadPause(ctx context.Context, lock string) (p *record.Pause, index uint64, err error) {
	// One GET ?consistent, not the batched read transaction: a runner
	// sends it at start and after acquiring, and a token that may not read
	// the key gets a plain 403.
	rec, found, err := r.Get(ctx, lockmodel.KindPauses, lock)
	if err != nil || !found {
		return nil, 0, err
	}
	got, err := record.DecodePauseRecord(rec.Value)
	if err != nil {
		return nil, rec.ModifyIndex, err
	}
	return &got, rec.ModifyIndex, nil
}

// WritePause writes p's record if its ModifyIndex is still expectIndex (0:
// only if the lock is not paused).
func (r *Registry) WritePause(ctx context.Context, p record.Pause, expectIndex uint64) (uint64, error) {
	b, err := record.EncodePauseRecord(p)
	if err != nil {
		return 0, err
	}
	return r.Put(ctx, lockmodel.KindPauses, p.Lock, b, expectIndex)
}

// DeletePause removes lock's pause record if its ModifyIndex is still
// expectIndex (0: whatever it is); an absent record is not an error.
func (r *Registry) DeletePause(ctx context.Context, lock string, expectIndex uint64) error {
	return r.Delete(ctx, lockmodel.KindPauses, lock, expectIndex)
}
