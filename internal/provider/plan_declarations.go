package provider

import (
	"sync"
)

// plannedDeclarations are what the resources of the current plan declare,
// recorded by their ModifyPlan: profile names, and lock names with their
// prefixes and keys. A plan-time check that looks a declaration up in
// Consul looks here too, so that a lock added in the same plan as its
// profile or its policy is not called unknown. Terraform plans a resource
// after those it references: a lock whose session_defaults references
// consullock_session_defaults.x.name, or a policy whose lock_keys
// reference consullock_lock.y.key, finds them here. A literal name has no
// such order (nor at apply), which is why the error asks for a reference.
// A nil *plannedDeclarations records nothing.
type plannedDeclarations struct {
	mu        sync.Mutex
	profiles  map[string]bool
	lockNames []string
	lockPaths []string // prefixes and keys
}

func newPlannedDeclarations() *plannedDeclarations {
	return &plannedDeclarations{profiles: map[string]bool{}}
}

func (p *plannedDeclarations) addProfile(name string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.profiles[name] = true
}

func (p *plannedDeclarations) hasProfile(name string) bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.profiles[name]
}

// addLock records a planned lock: its name (when known) and its prefix
// and key (those known).
func (p *plannedDeclarations) addLock(name string, paths ...string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if name != "" {
		p.lockNames = append(p.lockNames, name)
	}
	for _, s := range paths {
		if s != "" {
			p.lockPaths = append(p.lockPaths, s)
		}
	}
}

// locks returns the planned locks' names and paths.
func (p *plannedDeclarations) locks() (names, paths []string) {
	if p == nil {
		return nil, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.lockNames...), append([]string(nil), p.lockPaths...)
}
