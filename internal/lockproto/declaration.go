package lockproto

import (
	"context"
	"errors"
	"fmt"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/store"
)

// ErrNotDeclared: the registry has no record of the lock.
var ErrNotDeclared = errors.New("not declared")

// ReadDeclaration reads the record of the lock called name under the
// registry prefix and its session profile, consistently, for a holder that
// acquires a declared lock. The profile is resolved (defaults applied) by
// its decoder, record.DecodeSessionProfileRecord.
func ReadDeclaration(ctx context.Context, c *consul.Client, registryPrefix, name string) (lockmodel.Lock, lockmodel.Profile, error) {
	reg := store.New(c).Registry(registryPrefix)
	rec, found, err := reg.Get(ctx, lockmodel.KindLock, name)
	if err != nil {
		return lockmodel.Lock{}, lockmodel.Profile{}, fmt.Errorf("read the declaration of lock %q: %w", name, err)
	}
	if !found {
		return lockmodel.Lock{}, lockmodel.Profile{}, fmt.Errorf("lock %q is %w: there is no record at %s; "+
			"declare it (resource consullock_lock) or check the registry prefix", name, ErrNotDeclared, rec.Key)
	}
	l, err := record.DecodeLockRecord(rec.Value)
	if err != nil {
		return l, lockmodel.Profile{}, fmt.Errorf("the declaration at %s cannot be used: %w", rec.Key, err)
	}
	if l.Name != name {
		return l, lockmodel.Profile{}, fmt.Errorf("the declaration at %s is for lock %q, not %q", rec.Key, l.Name, name)
	}
	if l.SessionDefaults == "" {
		return l, consulDefaultProfile(l), nil
	}
	prec, found, err := reg.Get(ctx, lockmodel.KindSessionDefaults, l.SessionDefaults)
	if err != nil {
		return l, lockmodel.Profile{}, fmt.Errorf("read session profile %q of lock %q: %w", l.SessionDefaults, name, err)
	}
	if !found {
		return l, lockmodel.Profile{}, fmt.Errorf("lock %q uses session profile %q, which is not declared: there is no record at %s",
			name, l.SessionDefaults, prec.Key)
	}
	p, err := record.DecodeSessionProfileRecord(prec.Value)
	if err != nil {
		return l, p, fmt.Errorf("the session profile at %s cannot be used: %w", prec.Key, err)
	}
	return l, p, nil
}

// consulDefaultProfile is the profile of a declared lock without
// session_defaults: Consul's defaults (TTL 15s as api.Lock, lock-delay 15s,
// serfHealth), with behavior delete for a semaphore as api.Semaphore.
func consulDefaultProfile(l lockmodel.Lock) lockmodel.Profile {
	p := lockmodel.SessionProfile{Name: "consul-defaults", TTL: lockmodel.DefaultSessionTTL, LockDelay: lockmodel.DefaultLockDelay}
	if l.IsSemaphore() {
		p.Behavior = lockmodel.BehaviorDelete
	}
	return p.Resolve()
}
