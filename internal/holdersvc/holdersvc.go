package holdersvc

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/validation"
)

// Consul's limits on service metadata (consul agent/structs/structs.go,
// metaMaxKeyPairs, metaKeyMaxLength, metaValueMaxLength,
// MetaKeyReservedPrefix, metaKeyFormat).
const (
	MaxMetaPairs     = 64
	MaxMetaKeyLength = 128
	MaxMetaValueLen  = 512
	MetaReservedPfx  = "consul-"
	// MaxPort is the largest TCP port.
	MaxPort = 65535
	// MaxTags bounds tags: each is a DNS label, and a holder
	// service is looked up by name, rarely by more than a few tags.
	MaxTags = 32
	// DeregisterCriticalAfter is the instance's
	// DeregisterCriticalServiceAfter: the agent removes an instance whose
	// check stayed critical that long (its runner was killed and could not
	// deregister it). One minute is the least Consul honours.
	DeregisterCriticalAfter = time.Minute
	// CheckMargin is kept between a holder check's expiry and the
	// earliest take-over: time for the agent to sync the critical status
	// to the servers, which answer DNS and catalog queries.
	CheckMargin = time.Second
)

// The meta keys the runner writes on a holder's instance; a declaration's
// meta may not use them.
const (
	MetaLock         = "lock"          // the lock's name
	MetaSession      = "session"       // the holder's session ID
	MetaFencingToken = "fencing_token" // the holder's fencing token (decimal)
	MetaHolder       = "holder"        // the holder's node and process, "<node>/<pid>"
)

// MetaKeys lists the meta keys the runner writes, sorted.
var MetaKeys = []string{MetaFencingToken, MetaHolder, MetaLock, MetaSession}

// Field names of the holder_service block, as users write them.
const (
	FieldService = "holder_service"
	FieldName    = "holder_service.name"
	FieldTags    = "holder_service.tags"
	FieldPort    = "holder_service.port"
	FieldMeta    = "holder_service.meta"
)

// Service is a lock's holder_service block.
type Service struct {
	// Name is the service name: a DNS label, so that
	// <name>.service.consul resolves.
	Name string
	// Tags are DNS labels too (<tag>.<name>.service.consul).
	Tags []string
	// Port is the holder's port; 0 for none.
	Port int
	// Meta is added to the runner's own meta (MetaKeys).
	Meta map[string]string
}

// dnsLabelRE is an RFC 1123 label in lower case: what Consul serves under
// .service.consul without rewriting.
var dnsLabelRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// metaKeyRE is Consul's metaKeyFormat.
var metaKeyRE = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

const dnsLabelAllowed = "1 to 63 lower-case letters, digits or '-', starting and ending with a letter or digit (a DNS label, so that %s resolves)"

// ValidateName checks a holder service name on its own, as a
// *FieldError for field.
func ValidateName(field, name string) error {
	if dnsLabelRE.MatchString(name) {
		return nil
	}
	return &validation.FieldError{Field: field, Value: validation.Truncate(name, 70), Allowed: fmt.Sprintf(dnsLabelAllowed, "<name>.service.consul")}
}

// ValidateTag checks one tag, as a *FieldError for field.
func ValidateTag(field, tag string) error {
	if dnsLabelRE.MatchString(tag) {
		return nil
	}
	return &validation.FieldError{Field: field, Value: validation.Truncate(tag, 70), Allowed: fmt.Sprintf(dnsLabelAllowed, "<tag>.<name>.service.consul")}
}

// ValidateMetaKey checks one meta key, as a *FieldError for
// field: Consul's rule, and none of the keys the runner writes.
func ValidateMetaKey(field, key string) error {
	switch {
	case !metaKeyRE.MatchString(key) || len(key) > MaxMetaKeyLength:
		return &validation.FieldError{Field: field, Value: validation.Truncate(key, 140), Allowed: fmt.Sprintf(
			"a key of 1 to %d letters, digits, '-' or '_' (Consul's rule for service meta)", MaxMetaKeyLength)}
	case len(key) >= len(MetaReservedPfx) && key[:len(MetaReservedPfx)] == MetaReservedPfx:
		return &validation.FieldError{Field: field, Value: key, Allowed: fmt.Sprintf("a key not starting with %q (Consul reserves it)", MetaReservedPfx)}
	}
	for _, k := range MetaKeys {
		if key == k {
			return &validation.FieldError{Field: field, Value: key, Allowed: fmt.Sprintf(
				"a key other than %q: the runner writes them (lock, session, fencing token, holder)", MetaKeys)}
		}
	}
	return nil
}

// Validate reports every problem of s as FieldErrors named
// "holder_service.name" and so on.
func (s Service) Validate() error {
	var errs validation.FieldErrors
	add := func(err error) { errs = append(errs, validation.AsFieldErrors(err)...) }
	add(ValidateName(FieldName, s.Name))
	if len(s.Tags) > MaxTags {
		errs = append(errs, &validation.FieldError{Field: FieldTags, Value: strconv.Itoa(len(s.Tags)) + " tags",
			Allowed: fmt.Sprintf("at most %d tags", MaxTags)})
	}
	seen := map[string]bool{}
	for _, t := range s.Tags {
		add(ValidateTag(FieldTags, t))
		if seen[t] {
			errs = append(errs, &validation.FieldError{Field: FieldTags, Value: t, Allowed: "each tag at most once"})
		}
		seen[t] = true
	}
	if s.Port < 0 || s.Port > MaxPort {
		errs = append(errs, &validation.FieldError{Field: FieldPort, Value: strconv.Itoa(s.Port),
			Allowed: fmt.Sprintf("a port from 1 to %d (unset: no port)", MaxPort)})
	}
	if most := MaxMetaPairs - len(MetaKeys); len(s.Meta) > most {
		errs = append(errs, &validation.FieldError{Field: FieldMeta, Value: strconv.Itoa(len(s.Meta)) + " pairs", Allowed: fmt.Sprintf(
			"at most %d pairs (Consul allows %d, the runner writes %d)", most, MaxMetaPairs, len(MetaKeys))})
	}
	for _, k := range sortedKeys(s.Meta) {
		add(ValidateMetaKey(FieldMeta, k))
		if v := s.Meta[k]; len(v) > MaxMetaValueLen {
			errs = append(errs, &validation.FieldError{Field: FieldMeta, Value: k + "=" + validation.Truncate(v, 40),
				Allowed: fmt.Sprintf("a value of at most %d bytes (Consul's limit)", MaxMetaValueLen)})
		}
	}
	return errs.Err()
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// ServiceID is the service ID of a holder's instance: the service
// name and the holder's session ID, unique per holder (a semaphore's
// holders register one instance each) and recognisable in the catalog.
func ServiceID(name, session string) string {
	return name + "-" + session
}

// CheckID is the ID of the TTL check of instance serviceID, the one
// Consul would give a service's only check.
func CheckID(serviceID string) string {
	return "service:" + serviceID
}

// Identity is who registers an instance: the lock, the holder's
// session, its fencing token, node and process.
type Identity struct {
	Lock         string
	Session      string
	FencingToken uint64
	Node         string
	PID          int
}

// Instance is the service instance a holder registers: what
// consul.RegisterHolderService sends.
type Instance struct {
	ID      string
	Name    string
	Tags    []string
	Port    int
	Address string // "" for the node's address
	Meta    map[string]string
	CheckID string
	Check   Check
	// Passing: the check starts passing (else critical, until the first
	// pass): Check.PassAllowed at registration.
	Passing bool
}

// Instance is h's instance of s. address and port, when set, override
// the node's address and the declared port (a runner's -service-address
// and -service-port, e.g. several holders on one host).
func (s Service) Instance(h Identity, check Check, address string, port int) Instance {
	id := ServiceID(s.Name, h.Session)
	meta := make(map[string]string, len(s.Meta)+len(MetaKeys))
	for k, v := range s.Meta {
		meta[k] = v
	}
	meta[MetaLock] = h.Lock
	meta[MetaSession] = h.Session
	meta[MetaFencingToken] = strconv.FormatUint(h.FencingToken, 10)
	meta[MetaHolder] = h.Node + "/" + strconv.Itoa(h.PID)
	if port == 0 {
		port = s.Port
	}
	return Instance{
		ID: id, Name: s.Name, Tags: append([]string(nil), s.Tags...), Port: port, Address: address,
		Meta: meta, CheckID: CheckID(id), Check: check,
	}
}

// Check is the TTL check of a holder's instance. The holder passes it
// after each renewal of its session that Consul answered, so it goes
// critical when the holder stops renewing; it must then be critical (and
// the instance out of DNS and health-filtered catalog answers) before
// anyone else can acquire, however the session ends.
//
// The earliest take-over, counted from the holder's last confirmed contact
// c (the send time of its last answered renewal; the session was alive
// then), for a holder whose runner is frozen, killed or cut off and so
// cannot withdraw its instance, is the least over the ways a session ends:
//
//   - expiry: the session outlives c by at least its TTL (the servers wait
//     SessionTTLMultiplier x TTL), then the key is under lock-delay:
//     c + ttl + L, where L = min(lock_delay, 60s) (lockmodel.TakeOverDelay);
//   - destroy or invalidation at any d >= c (an operator, the controller at
//     max_hold, force_destroy, a failing node or service check): the key is
//     free at d + L, so from c + L on;
//   - release: only a live runner releases, and it deregisters first.
//
// So Bound = min(ttl + L, L) = L: the lock-delay alone, whatever the ttl.
// (When the node fails, serfHealth also turns the node's instances
// critical.)
//
// A pass sent at c + s lands at the latest s + PassTimeout after c and
// keeps the check passing for TTL, so it is safe exactly when
// s + PassTimeout + TTL + CheckMargin <= Bound (PassAllowed:
// the check is critical at least the margin before the take-over). Passes
// follow renewals (s <= RenewTimeout), so
//
//	TTL <= Bound - 2 x RenewTimeout - CheckMargin   (the ceiling)
//
// and, for the check not to go critical between healthy renewals (sent
// every RenewEvery from their send times, each pass landing up to
// 2 x RenewTimeout after its renewal's send time), TTL > RenewEvery +
// 2 x RenewTimeout (the floor). Both hold only when
//
//	RenewEvery + 4 x RenewTimeout + CheckMargin < L
//
// (Check.MaxRenewEvery and MinLockDelay solve it for renew_every and
// lock_delay). TTL is RenewEvery more than the floor, so one failed renewal
// (retried within half a second) does not flap DNS, unless the ceiling is
// lower: then the ceiling wins (safety first, never below
// MinCheckTTL) and Flaps is set. PassAllowed still decides each pass
// exactly, so with a short lock_delay a holder is in DNS only for a moment
// after each fast renewal, or never (PassAllowed(0) false).
type Check struct {
	Timing
	TTL         time.Duration
	PassTimeout time.Duration // bounds one pass request
	Flaps       bool          // TTL not above TTLFloor, or above TTLCeiling (raised to MinCheckTTL)
	TTLFloor    time.Duration // RenewEvery + 2 x RenewTimeout: the TTL healthy renewals need
	TTLCeiling  time.Duration // Bound - 2 x RenewTimeout - CheckMargin: the longest safe TTL
}

// Timing is what a holder check follows of its holder's session, as the
// session rules (package lockmodel, NewHolderCheck) resolve them from the
// profile.
type Timing struct {
	Bound           time.Duration // the earliest take-over after the last contact: min(lock_delay, 60s)
	RenewEvery      time.Duration // the profile's, for the warning
	RenewTimeout    time.Duration // bounds one renewal
	MaxRenewTimeout time.Duration // RenewTimeout for any renew_every at most this
	MaxLockDelay    time.Duration // the longest lock_delay Consul honours
}

// MinCheckTTL is the shortest holder check TTL: the least interval
// Consul runs a check at (agent/checks MinInterval).
const MinCheckTTL = time.Second

// NewCheck is the holder check for a session of timing t.
func NewCheck(t Timing) Check {
	c := Check{Timing: t, PassTimeout: t.RenewTimeout}
	c.TTLFloor = t.RenewEvery + 2*t.RenewTimeout
	c.TTLCeiling = t.Bound - 2*t.RenewTimeout - CheckMargin
	c.TTL = max(min(c.TTLFloor+t.RenewEvery, c.TTLCeiling), MinCheckTTL)
	c.Flaps = c.TTL <= c.TTLFloor || c.TTL > c.TTLCeiling
	return c
}

// PassAllowed reports whether a pass sent sinceContact after the holder's
// last confirmed contact keeps the check's expiry at least
// CheckMargin before the earliest take-over.
func (c Check) PassAllowed(sinceContact time.Duration) bool {
	return sinceContact >= 0 && sinceContact+c.PassTimeout+c.TTL+CheckMargin <= c.Bound
}

// MaxRenewEvery is the supremum of the renew_every values whose check
// does not flap with c's lock-delay: RenewEvery + 4 x RenewTimeout +
// CheckMargin < Bound, solved for RenewEvery (RenewTimeout is
// RenewEvery up to MaxRenewTimeout), with a ceiling of at least
// MinCheckTTL. Zero when none does.
func (c Check) MaxRenewEvery() time.Duration {
	room := c.Bound - CheckMargin
	if room > 5*c.MaxRenewTimeout {
		return room - 4*c.MaxRenewTimeout
	}
	return max(min(room/5, (room-MinCheckTTL)/2), 0)
}

// MinLockDelay is the infimum of the lock_delay values whose check does
// not flap with c's renew_every: RenewEvery + 4 x RenewTimeout +
// CheckMargin (and 2 x RenewTimeout + CheckMargin +
// MinCheckTTL). It may exceed c.MaxLockDelay: then no lock_delay helps.
func (c Check) MinLockDelay() time.Duration {
	return max(c.RenewEvery+4*c.RenewTimeout, 2*c.RenewTimeout+MinCheckTTL) + CheckMargin
}

// Warnings says when the check cannot stay passing between healthy
// renewals while being critical before the earliest take-over (a
// lock_delay short for the renew_every), naming the numbers and the
// renew_every or lock_delay that would do.
func (c Check) Warnings() []validation.Warning {
	if !c.Flaps {
		return nil
	}
	summary, effect := "Holder Check May Flap",
		"so the holder may drop out of DNS between renewals"
	if !c.PassAllowed(0) {
		summary, effect = "Holder Never In DNS", "so the holder's check is never passed and the holder never appears in DNS"
	}
	fix := fmt.Sprintf("Lower renew_every below %s", c.MaxRenewEvery())
	if c.MaxRenewEvery() <= 0 {
		fix = "No renew_every is short enough"
	}
	if need := c.MinLockDelay(); need < c.MaxLockDelay {
		fix += fmt.Sprintf(", or raise lock_delay above %s", need)
	}
	return []validation.Warning{{
		Field:   FieldService,
		Summary: summary,
		Detail: fmt.Sprintf("A destroyed session (an operator, the controller at max_hold, force_destroy, a failing check) "+
			"frees the lock lock_delay %s after the destroy, which may come right after a renewal: the holder's check must be "+
			"critical by then, so its TTL is at most lock_delay - 2 x renewal timeout %s - margin %s = %s (and never below %s). "+
			"Staying passing between renewals needs more than renew_every %s + 2 x renewal timeout = %s; the check TTL is %s, "+
			"%s. %s.",
			c.Bound, c.RenewTimeout, CheckMargin, c.TTLCeiling,
			MinCheckTTL, c.RenewEvery, c.TTLFloor, c.TTL,
			effect, fix),
	}}
}

// How a runner registers its holder's instance (-service-registration).
const (
	// ViaAuto picks ViaCatalog when the runner names its
	// session's node (-node), ViaAgent otherwise.
	ViaAuto = "auto"
	// ViaAgent registers on the agent the runner talks to (PUT
	// /v1/agent/service/register): the agent runs the TTL check and
	// removes the instance when its node fails.
	ViaAgent = "agent"
	// ViaCatalog registers on the session's node in the catalog (PUT
	// /v1/catalog/register), for runners with no agent of their own
	// (agentless): nobody runs a catalog check, so the instance is passing
	// until it is deregistered (InstanceStale says who reaps it).
	ViaCatalog = "catalog"
)

// Via resolves a runner's -service-registration value against its
// -node: it returns how the instance is registered, and why, for the
// runner's log line. A client agent runs the node it is for: a catalog
// registration on that node would be removed by the agent's anti-entropy,
// and an agent registration puts the instance on the agent's node, so the
// rule follows the session: on the agent's node without -node, on the
// named node with it. catalog without -node is refused: the instance
// would have no node of its own.
func Via(value, node string) (via, reason string, err error) {
	switch value {
	case ViaAuto, "":
		if node != "" {
			return ViaCatalog, "-node names the session's node: the instance is registered on it in the catalog (-service-registration agent registers on the agent instead)", nil
		}
		return ViaAgent, "no -node: the session and the instance are on the node of the agent at CONSUL_HTTP_ADDR", nil
	case ViaAgent:
		return ViaAgent, "-service-registration agent", nil
	case ViaCatalog:
		if node == "" {
			return "", "", &validation.FieldError{Field: "-service-registration", Value: value,
				Allowed: "catalog only with -node NAME (the node the instance is registered on); agent or auto without it"}
		}
		return ViaCatalog, "-service-registration catalog", nil
	}
	return "", "", &validation.FieldError{Field: "-service-registration", Value: validation.Truncate(value, 40), Allowed: "auto, agent or catalog"}
}

// InstanceStale reports whether another holder's instance of the
// same lock, found on any node, is stale: its session is not a holder's
// any more. A mutex has one holder, so once this one holds, every other
// session's instance is stale; a semaphore's other holders keep theirs
// while their session lives (a runner leaves the semaphore before it
// destroys its session, and deregisters before it leaves). A
// catalog-registered instance has no agent to take it out of DNS: the next
// holder deregisters the stale ones, on whatever node they are, before it
// starts its command. An observer that holds nothing (mine "": the
// controller) cannot tell a current holder's instance from a former one's
// by the lock alone: for it an instance is stale once its session has
// ended (a session ID is never reused).
func InstanceStale(limit int, mine, other string, otherAlive bool) bool {
	switch {
	case other == mine:
		return false
	case mine == "":
		return !otherAlive
	}
	return limit <= 1 || !otherAlive
}

// allowedHolderNode is the form of a node that carries holder instances.
const allowedHolderNode = "1 to 63 letters, digits or '-', starting and ending with a letter or digit " +
	"(a DNS label: SRV answers for the holder service name this node, and Consul's answers for a longer one time out)"

// ValidateNode checks the name of the node an agentless runner
// registers its holder's instance on (consullock run -node with a catalog
// registration), as a *FieldError for field. Consul answers an SRV query
// for <name>.service.consul with a target <node>.node.<dc>.consul, so the
// node must be a DNS label, as a holder service name is (the same rule,
// either case: DNS names are case-insensitive); with a 75-character node
// name the agent's SRV answers for the service timed out. The session
// itself would be fine on any node: only the holder service needs this.
func ValidateNode(field, node string) error {
	if dnsLabelRE.MatchString(strings.ToLower(node)) {
		return nil
	}
	return &validation.FieldError{Field: field, Value: validation.Truncate(node, 80), Allowed: allowedHolderNode}
}
