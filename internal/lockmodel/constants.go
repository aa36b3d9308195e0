package lockmodel

import "time"

// Protocol values shared with Consul's api.Lock, api.Semaphore and `consul lock`.
// Keys this product creates must work with all of them, so these are Consul's
// values, not ours.
const (
	// LockFlagValue is the KV Flags value of a mutex key; api.Lock refuses any
	// other (consul api/lock.go, LockFlagValue).
	LockFlagValue uint64 = 0x2ddccbc058a50c18

	// SemaphoreFlagValue is the KV Flags value of a semaphore's .lock key and
	// contender keys (consul api/semaphore.go, SemaphoreFlagValue).
	SemaphoreFlagValue uint64 = 0xe0f69a2baa414de0

	// LockKeyName is the key `consul lock` and api.Semaphore use under a
	// prefix: <prefix>/.lock (consul api/semaphore.go, DefaultSemaphoreKey).
	LockKeyName = ".lock"
)

// Session limits and defaults as the Consul server applies them.
const (
	// MinSessionTTL is the server's default session_ttl_min (consul
	// agent/config/default.go), enforced in agent/consul/session_endpoint.go.
	MinSessionTTL = 10 * time.Second

	// MaxSessionTTL is the largest TTL the server accepts (consul
	// agent/structs/structs.go, SessionTTLMax).
	MaxSessionTTL = 24 * time.Hour

	// SessionTTLMultiplier is how many TTLs the server waits before it
	// invalidates a session that was not renewed (consul
	// agent/structs/structs.go, SessionTTLMultiplier).
	SessionTTLMultiplier = 2

	// MaxLockDelay is the largest lock-delay the server honours; it silently
	// clamps longer ones (consul agent/structs/structs.go, MaxLockDelay).
	MaxLockDelay = 60 * time.Second

	// DefaultSessionTTL is the TTL api.Lock gives its sessions (consul
	// api/lock.go, DefaultLockSessionTTL).
	DefaultSessionTTL = 15 * time.Second

	// DefaultLockDelay is the lock-delay the server uses when a session
	// create request carries none (consul agent/session_endpoint.go).
	DefaultLockDelay = 15 * time.Second

	// DefaultNodeCheck is the node health check a session is bound to when
	// none are given (consul agent/structs/structs.go, SerfCheckID).
	DefaultNodeCheck = "serfHealth"
)

// consullock's own conventions.
const (
	// DefaultRegistryPrefix is the KV prefix under which declarations are
	// stored unless the provider's registry_prefix says otherwise.
	DefaultRegistryPrefix = "consul-lock"

	// MaxSemaphoreLimit is the largest semaphore limit a lock may declare.
	MaxSemaphoreLimit = 1024

	// MaxDescriptionLength is the longest lock description, in characters.
	MaxDescriptionLength = 1024

	// MinMaxHold is the shortest non-zero max_hold.
	MinMaxHold = time.Second
)

// Behavior is what Consul does with the keys a session holds when the session
// is invalidated (consul api/session.go, SessionBehaviorRelease/Delete).
type Behavior string

const (
	// BehaviorRelease releases the held keys and keeps them (Consul's default).
	BehaviorRelease Behavior = "release"
	// BehaviorDelete deletes the held keys; api.Semaphore uses it.
	BehaviorDelete Behavior = "delete"
)

// Behaviors lists the valid behaviors for validators, in documentation order.
func Behaviors() []string {
	return []string{string(BehaviorRelease), string(BehaviorDelete)}
}

// Valid reports whether b is one of Behaviors.
func (b Behavior) Valid() bool {
	return b == BehaviorRelease || b == BehaviorDelete
}
