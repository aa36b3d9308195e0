package concurrency

import (
	"log/slog"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/lockproto"
)

// Option configures a Session, a declared lock or a RunOnce (functional
// options, as etcd's). Each option says what it applies to; others ignore
// it.
type Option func(*config)

type config struct {
	ttl         time.Duration
	lockDelay   *time.Duration
	profile     string
	registry    string
	sessionName string
	renewEvery  time.Duration
	grace       time.Duration
	log         *slog.Logger
	holderValue func() []byte

	// Set by the module's door (internal/libhold), never by an Option:
	// perHold has the loss judge decide for the session's one hold, as
	// libhold describes; observed replaces the logging of failed
	// renewals; ruleWarned skips the stop rule's warning.
	perHold    bool
	observed   func(o lockproto.Observation, held bool, lostIfNoRenewalBy time.Time)
	ruleWarned bool
}

func newConfig(opts []Option) config {
	c := config{registry: lockmodel.DefaultRegistryPrefix, grace: lockmodel.DefaultRunnerGrace, log: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(&c)
	}
	return c
}

// WithTTL sets the session TTL (10s to 24h; default 15s, as api.Lock).
// Session only; not with WithProfile.
func WithTTL(ttl time.Duration) Option { return func(c *config) { c.ttl = ttl } }

// WithLockDelay sets the session's lock-delay (0 to 60s; default 15s):
// after the session ends without releasing, its keys stay unacquirable
// that long. Session only; not with WithProfile.
func WithLockDelay(d time.Duration) Option { return func(c *config) { c.lockDelay = &d } }

// WithRenewEvery sets how often the session is renewed: more than 0 and
// at most half the TTL, the interval of Consul's api.Lock (default a
// third of the TTL). The stop rule counts with it: a healthy holder's
// last renewal may be one interval plus a renewal's timeout old, so a
// loss cannot be decided sooner; NewSession warns through WithLogger when
// a holder cut off from Consul then cannot stop before another may take
// over. Session only; not with WithProfile, whose renew_every applies.
func WithRenewEvery(d time.Duration) Option { return func(c *config) { c.renewEvery = d } }

// WithProfile creates the session from the declared session profile
// (resource consullock_session_defaults) of that name, read from the
// registry. Session only.
func WithProfile(name string) Option { return func(c *config) { c.profile = name } }

// WithRegistryPrefix is the KV prefix of the declarations (the provider's
// registry_prefix; default "consul-lock"). Session (its declared profile
// and declared locks) and RunOnce.
func WithRegistryPrefix(prefix string) Option { return func(c *config) { c.registry = prefix } }

// WithSessionName names the Consul session (default "consullock
// concurrency"). Session and RunOnce.
func WithSessionName(name string) Option { return func(c *config) { c.sessionName = name } }

// WithGrace is how long the caller needs to stop its work once Done is
// closed or its context cancelled (default 5s, the runner's -grace): the
// stop rule declares the lock lost that much before another holder could
// take it. Session and RunOnce.
func WithGrace(d time.Duration) Option { return func(c *config) { c.grace = d } }

// WithLogger receives warnings (failed renewals, cleanup failures), the
// releases and the session's end, and the run-once steps; by default
// nothing is logged. Session and RunOnce.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.log = l } }

// WithHolderValue has every lock held through the session write f() into
// its key (a mutex's key, a semaphore's contender key) instead of the
// default, a JSON object naming the node, the process ID, the start of the
// hold and the lock, as `consullock run` writes it. f is called at every
// acquisition attempt; the value of the attempt that won is written again
// at the release. A value that is such a JSON object gets the session's
// lock-delay added, which other holders' waiters read; any other value is
// written as given. `consullock status` and the controller read the
// default value to name a holder and to time its hold against max_hold,
// so keep it for a declared lock. Session only.
func WithHolderValue(f func() []byte) Option { return func(c *config) { c.holderValue = f } }
