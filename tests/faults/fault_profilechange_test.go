package faults

import (
	"fmt"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"

	"github.com/consullock/terraform-provider-consullock/internal/record"
)

// FaultProfileChange rewrites a lock's session profile (Value: the
// variant, 1..ProfileVariants).
const FaultProfileChange FaultKind = "profile-change"

type profileChange struct{}

func (profileChange) Spec() FaultSpec { return FaultSpec{Name: FaultProfileChange, Weight: 1} }

// Draw picks the mutexes' or the semaphore's profile (the run-once
// lock's stays).
func (profileChange) Draw(sc *scheduler, s *Step) {
	s.Target, s.Value = sc.profiled[sc.intN(len(sc.profiled))], 1+sc.intN(max(1, sc.cfg.ProfileVariants))
}

func (profileChange) Inject(n *nemesis, sh shot) (func(), bool) { return nil, n.changeProfile(sh.s) }

// changeProfile rewrites the target lock's session profile record to the
// step's variant, as an apply would.
func (n *nemesis) changeProfile(s Step) bool {
	h := n.target(s)
	variants := nemesisMutexProfiles
	if h == n.sem {
		variants = nemesisSemaphoreProfiles
	}
	p := variants[(s.Value-1)%len(variants)]
	p.Name = h.profile.Name
	rec, err := record.EncodeSessionProfileRecord(p)
	if err != nil {
		n.fatalf("encoding profile: %v", err)
	}
	h.store.Mark("", fmt.Sprintf("nemesis: profile %s -> ttl %s lock_delay %s", p.Name, p.TTL, p.LockDelay))
	key := lockmodel.RegistryKey(lockmodel.DefaultRegistryPrefix, lockmodel.KindSessionDefaults, p.Name)
	ok := n.admin(func(c *api.Client) error { _, err := c.KV().Put(&api.KVPair{Key: key, Value: rec}, nil); return err })
	if ok {
		n.mu.Lock()
		n.profiles[s.Target] = s.Value
		n.mu.Unlock()
	}
	return ok
}
