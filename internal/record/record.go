package record

// Registry records.
//
// Every declaration is stored in Consul KV as one JSON document at
// RegistryKey(registry, kind, name), for example
// consul-lock/locks/nightly-report. The document is an envelope around a
// kind-specific spec:
//
//	{"schema_version":1,"kind":"lock","name":"nightly-report","spec":{...},"managed_by":"consullock"}
//
// Record kinds are "lock" (LockSpec, under locks/), "session_defaults"
// (SessionProfileSpec, under session-defaults/) and "acl_policy"
// (ACLPolicySpec, under acl-policies/), and, not a declaration, a lock's
// run ledger "run_ledger" (LedgerSpec, under runs/, ledger_record.go). Durations are Go duration strings
// ("15s", "1m30s"), KV flags are hex strings ("0x2ddccbc058a50c18") because
// they exceed the integers JSON numbers carry exactly. Writers always write
// every field; readers ignore fields they do not know, so adding a field does
// not change schema_version, and refuse a schema_version above
// RecordSchemaVersion. RECORDS.md in this directory has an example of each
// record.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"
	"unicode/utf8"

	"github.com/consullock/terraform-provider-consullock/internal/holdersvc"
	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/validation"
)

const (
	// RecordSchemaVersion is the schema_version this package writes and the
	// highest one it reads (see RECORDS.md).
	RecordSchemaVersion = 1

	// ManagedBy is the managed_by value of every record this product writes.
	ManagedBy = "consullock"
)

// Record kinds, the "kind" of the envelope.
const (
	RecordKindLock            = "lock"
	RecordKindSessionDefaults = "session_defaults"
	RecordKindACLPolicy       = "acl_policy"
)

// RegistryKindOf maps a record kind to its registry folder (KindLock, ...);
// "" for an unknown kind.
func RegistryKindOf(recordKind string) string {
	switch recordKind {
	case RecordKindLock:
		return lockmodel.KindLock
	case RecordKindSessionDefaults:
		return lockmodel.KindSessionDefaults
	case RecordKindACLPolicy:
		return lockmodel.KindACLPolicy
	case RecordKindRunLedger:
		return lockmodel.KindRuns
	case RecordKindPause:
		return lockmodel.KindPauses
	}
	return ""
}

// Record is the envelope of every registry record.
type Record struct {
	SchemaVersion int             `json:"schema_version"`
	Kind          string          `json:"kind"`
	Name          string          `json:"name"`
	Spec          json.RawMessage `json:"spec"`
	ManagedBy     string          `json:"managed_by"`
}

// ErrNewerSchema marks a record written by a newer consullock; callers may
// skip such a record rather than fail.
var ErrNewerSchema = errors.New("registry record written by a newer consullock")

// LockSpec is the spec of a "lock" record.
type LockSpec struct {
	Name            string `json:"name"`
	Prefix          string `json:"prefix"`
	Key             string `json:"key"`
	Limit           int    `json:"limit"`
	Flags           string `json:"flags"`            // FormatFlags; informational, must match limit
	SessionDefaults string `json:"session_defaults"` // "" for none
	MaxHold         string `json:"max_hold"`         // "" for no limit
	Description     string `json:"description"`
	AlwaysHeld      bool   `json:"always_held"` // absent (records written before it existed) = false
	// RunOnce is absent for a lock without run_once, so such a lock's
	// record is byte for byte what earlier versions wrote.
	RunOnce *RunOnceSpec `json:"run_once,omitempty"`
	// HolderService is absent for a lock without holder_service, as
	// RunOnce.
	HolderService *ServiceSpec `json:"holder_service,omitempty"`
	// Waiters is absent for "race" (the default), as RunOnce.
	Waiters string `json:"waiters,omitempty"`
}

// ServiceSpec is the holder_service of a LockSpec.
type ServiceSpec struct {
	Name string            `json:"name"`
	Tags []string          `json:"tags"` // [] for none
	Port int               `json:"port"` // 0 for none
	Meta map[string]string `json:"meta"` // {} for none
}

// RunOnceSpec is the run_once of a LockSpec, with defaults applied.
type RunOnceSpec struct {
	Period      string `json:"period,omitempty"` // absent with schedule
	Offset      string `json:"offset,omitempty"` // absent = "0s"
	MaxAttempts int    `json:"max_attempts"`     // absent (0) = DefaultMaxAttempts
	Keep        int    `json:"keep"`             // absent (0) = DefaultRunKeep
	// Schedule and TimeZone replace Period and Offset for calendar slots;
	// absent for a period lock, so its record is what earlier versions
	// wrote.
	Schedule         string `json:"schedule,omitempty"`
	TimeZone         string `json:"time_zone,omitempty"`
	StartingDeadline string `json:"starting_deadline,omitempty"` // absent = no deadline
	// Since (RFC 3339, UTC) is when these slots were declared; absent when
	// unknown.
	Since string `json:"since,omitempty"`
	// Job control (ledger/jobcontrol.go); absent = none, 0s, and the default
	// factor: a record without them is what earlier versions wrote.
	MaxRuntime   string  `json:"max_runtime,omitempty"`
	RetryAfter   string  `json:"retry_after,omitempty"`
	RetryBackoff float64 `json:"retry_backoff,omitempty"`
	// Overlap is run_once.overlap; absent = "wait", as earlier versions
	// behaved.
	Overlap string `json:"overlap,omitempty"`
}

// SessionProfileSpec is the spec of a "session_defaults" record. It holds the
// effective values (lockmodel.SessionProfile.Resolve), so readers need no
// defaults of their own.
type SessionProfileSpec struct {
	Name          string                   `json:"name"`
	TTL           string                   `json:"ttl"`
	LockDelay     string                   `json:"lock_delay"`
	Behavior      string                   `json:"behavior"`
	NodeChecks    []string                 `json:"node_checks"` // [] means none; absent (null) means ["serfHealth"]
	ServiceChecks []lockmodel.ServiceCheck `json:"service_checks"`
	RenewEvery    string                   `json:"renew_every"`
	WorstCaseGap  string                   `json:"worst_case_gap"` // informational, recomputed on read
}

// ACLPolicySpec is a declared ACL policy and the spec of an "acl_policy"
// record. Rules is the canonical HCL rendered by package aclrules.
type ACLPolicySpec struct {
	Name        string   `json:"name"`
	ID          string   `json:"id"` // Consul's policy ID once created; "" before
	Rules       string   `json:"rules"`
	Datacenters []string `json:"datacenters"`
	Description string   `json:"description"`
}

// DatacenterPattern is what an ACL policy's datacenters may hold: Consul
// lower-cases datacenter names.
const DatacenterPattern = `^[a-z0-9_-]{1,64}$`

// UUIDPattern is the form of Consul's ACL object IDs and token secrets.
const UUIDPattern = `^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`

var (
	uuidRE       = regexp.MustCompile(UUIDPattern)
	datacenterRE = regexp.MustCompile(DatacenterPattern)
)

// Validate reports every problem of s as FieldErrors.
// IsUUID reports whether s is a UUID, as Consul writes session and
// accessor IDs.
func IsUUID(s string) bool { return uuidRE.MatchString(s) }

func (s ACLPolicySpec) Validate() error {
	var errs validation.FieldErrors
	errs = append(errs, validation.AsFieldErrors(lockmodel.ValidateName("name", s.Name))...)
	if s.ID != "" && !uuidRE.MatchString(s.ID) {
		errs = append(errs, &validation.FieldError{Field: "id", Value: s.ID, Allowed: "a Consul policy ID (a UUID such as 00000000-0000-0000-0000-000000000001)"})
	}
	if !utf8.ValidString(s.Rules) {
		errs = append(errs, &validation.FieldError{Field: "rules", Value: validation.Truncate(s.Rules, 40), Allowed: "valid UTF-8 text"})
	}
	if !utf8.ValidString(s.Description) {
		errs = append(errs, &validation.FieldError{Field: "description", Value: validation.Truncate(s.Description, 40), Allowed: "valid UTF-8 text"})
	}
	seen := map[string]bool{}
	for _, dc := range s.Datacenters {
		switch {
		case !datacenterRE.MatchString(dc):
			errs = append(errs, &validation.FieldError{Field: "datacenters", Value: dc, Allowed: "datacenter names of 1 to 64 lower-case letters, digits, '-' or '_', as Consul names datacenters"})
		case seen[dc]:
			errs = append(errs, &validation.FieldError{Field: "datacenters", Value: dc, Allowed: "each datacenter at most once"})
		}
		seen[dc] = true
	}
	return errs.Err()
}

// EncodeLockRecord renders the registry record of l (normalised). It refuses
// an invalid lock.
func EncodeLockRecord(l lockmodel.Lock) ([]byte, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	n, _ := l.Normalize()
	spec := LockSpec{
		Name:            n.Name,
		Prefix:          n.Prefix,
		Key:             n.Key,
		Limit:           n.Limit,
		Flags:           lockmodel.FormatFlags(n.Flags()),
		SessionDefaults: n.SessionDefaults,
		Description:     n.Description,
		AlwaysHeld:      n.AlwaysHeld,
	}
	if n.Queued() {
		spec.Waiters = n.Waiters
	}
	if r := n.RunOnce; r != nil {
		spec.RunOnce = &RunOnceSpec{MaxAttempts: r.MaxAttempts, Keep: r.Keep, Schedule: r.Schedule, TimeZone: r.TimeZone}
		if r.Schedule == "" {
			spec.RunOnce.Period, spec.RunOnce.Offset = lockmodel.FormatDuration(r.Period), lockmodel.FormatDuration(r.Offset)
		}
		if r.StartingDeadline != 0 {
			spec.RunOnce.StartingDeadline = lockmodel.FormatDuration(r.StartingDeadline)
		}
		if !r.Since.IsZero() {
			spec.RunOnce.Since = r.Since.UTC().Truncate(time.Second).Format(time.RFC3339)
		}
		if r.MaxRuntime != 0 {
			spec.RunOnce.MaxRuntime = lockmodel.FormatDuration(r.MaxRuntime)
		}
		if r.RetryAfter != 0 {
			spec.RunOnce.RetryAfter = lockmodel.FormatDuration(r.RetryAfter)
		}
		spec.RunOnce.RetryBackoff = r.RetryBackoff
		if r.Overlap != "" && r.Overlap != ledger.OverlapWait {
			spec.RunOnce.Overlap = string(r.Overlap)
		}
	}
	if h := n.HolderService; h != nil {
		spec.HolderService = &ServiceSpec{Name: h.Name, Tags: append([]string{}, h.Tags...), Port: h.Port, Meta: map[string]string{}}
		for k, v := range h.Meta {
			spec.HolderService.Meta[k] = v
		}
	}
	if n.MaxHold != 0 {
		spec.MaxHold = lockmodel.FormatDuration(n.MaxHold)
	}
	return encodeRecord(RecordKindLock, n.Name, spec)
}

// DecodeLockRecord parses and validates a "lock" record and returns the
// normalised lock.
func DecodeLockRecord(data []byte) (lockmodel.Lock, error) {
	var spec LockSpec
	if err := decodeRecord(data, RecordKindLock, &spec, func() string { return spec.Name }); err != nil {
		return lockmodel.Lock{}, err
	}
	var errs validation.FieldErrors
	maxHold, err := parseRecordDuration("max_hold", spec.MaxHold, 0)
	errs = append(errs, validation.AsFieldErrors(err)...)
	l := lockmodel.Lock{
		Name:            spec.Name,
		Prefix:          spec.Prefix,
		Key:             spec.Key,
		Limit:           spec.Limit,
		SessionDefaults: spec.SessionDefaults,
		MaxHold:         maxHold,
		Description:     spec.Description,
		AlwaysHeld:      spec.AlwaysHeld,
	}
	if spec.Waiters != lockmodel.WaitersRace {
		l.Waiters = spec.Waiters // "race" reads as "", as it was written
	}
	if h := spec.HolderService; h != nil {
		l.HolderService = &holdersvc.Service{Name: h.Name, Tags: h.Tags, Port: h.Port, Meta: h.Meta}
	}
	judged := l
	if r := spec.RunOnce; r != nil {
		period, perr := parseRecordDuration(ledger.FieldRunOncePeriod, r.Period, 0)
		offset, oerr := parseRecordDuration(ledger.FieldRunOnceOffset, r.Offset, 0)
		deadline, derr := parseRecordDuration(ledger.FieldRunOnceStartingDeadline, r.StartingDeadline, 0)
		runtime, rerr := parseRecordDuration(ledger.FieldRunOnceMaxRuntime, r.MaxRuntime, 0)
		retry, aerr := parseRecordDuration(ledger.FieldRunOnceRetryAfter, r.RetryAfter, 0)
		l.RunOnce = &ledger.RunOnce{Period: period, Offset: offset, MaxAttempts: r.MaxAttempts, Keep: r.Keep,
			Schedule: r.Schedule, TimeZone: r.TimeZone, StartingDeadline: deadline,
			MaxRuntime: runtime, RetryAfter: retry, RetryBackoff: r.RetryBackoff}
		if r.Overlap != string(ledger.OverlapWait) {
			l.RunOnce.Overlap = ledger.Overlap(r.Overlap) // "wait" reads as "", as it is written
		}
		if r.Since != "" {
			since, err := time.Parse(time.RFC3339, r.Since)
			if err != nil {
				errs = append(errs, &validation.FieldError{Field: "run_once.since", Value: r.Since, Allowed: "an RFC 3339 time"})
			}
			l.RunOnce.Since = since.UTC()
		}
		judged = l
		if perr != nil || oerr != nil || derr != nil || rerr != nil || aerr != nil {
			// Judge the rest without the unreadable durations: one error
			// per field.
			for _, err := range []error{perr, oerr, derr, rerr, aerr} {
				errs = append(errs, validation.AsFieldErrors(err)...)
			}
			judged.RunOnce = nil
		}
	}
	errs = append(errs, validation.AsFieldErrors(judged.Validate())...)
	if len(errs) == 0 && spec.Flags != "" {
		f, err := lockmodel.ParseFlags(spec.Flags)
		if err != nil || f != l.Flags() {
			errs = append(errs, &validation.FieldError{Field: "flags", Value: spec.Flags, Allowed: fmt.Sprintf(
				"%s for limit %d (flags follow from the limit)", lockmodel.FormatFlags(l.Flags()), max(l.Limit, 1))})
		}
	}
	if len(errs) > 0 {
		return lockmodel.Lock{}, recordError(RecordKindLock, spec.Name, errs)
	}
	n, _ := l.Normalize()
	return n, nil
}

// EncodeSessionProfileRecord renders the registry record of the declared
// profile p with its defaults applied (lockmodel.SessionProfile.Resolve). It
// refuses an invalid profile: p is validated as declared, before Resolve.
func EncodeSessionProfileRecord(p lockmodel.SessionProfile) ([]byte, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	d := p.Resolve()
	spec := SessionProfileSpec{
		Name:          d.Name,
		TTL:           lockmodel.FormatDuration(d.TTL),
		LockDelay:     lockmodel.FormatDuration(d.LockDelay),
		Behavior:      string(d.Behavior),
		NodeChecks:    d.NodeChecks,
		ServiceChecks: d.ServiceChecks,
		RenewEvery:    lockmodel.FormatDuration(d.RenewEvery),
		WorstCaseGap:  lockmodel.FormatDuration(d.WorstCaseGap()),
	}
	if spec.ServiceChecks == nil {
		spec.ServiceChecks = []lockmodel.ServiceCheck{}
	}
	return encodeRecord(RecordKindSessionDefaults, d.Name, spec)
}

// DecodeSessionProfileRecord parses and validates a "session_defaults" record
// and returns the profile resolved (defaults applied, once, here). An absent
// ttl or lock_delay means Consul's default (15s); write "0s" for no lock
// delay.
func DecodeSessionProfileRecord(data []byte) (lockmodel.Profile, error) {
	var spec SessionProfileSpec
	if err := decodeRecord(data, RecordKindSessionDefaults, &spec, func() string { return spec.Name }); err != nil {
		return lockmodel.Profile{}, err
	}
	var errs validation.FieldErrors
	ttl, err := parseRecordDuration("ttl", spec.TTL, lockmodel.DefaultSessionTTL)
	errs = append(errs, validation.AsFieldErrors(err)...)
	lockDelay, err := parseRecordDuration("lock_delay", spec.LockDelay, lockmodel.DefaultLockDelay)
	errs = append(errs, validation.AsFieldErrors(err)...)
	renew, err := parseRecordDuration("renew_every", spec.RenewEvery, 0)
	errs = append(errs, validation.AsFieldErrors(err)...)
	p := lockmodel.SessionProfile{
		Name:          spec.Name,
		TTL:           ttl,
		LockDelay:     lockDelay,
		Behavior:      lockmodel.Behavior(spec.Behavior),
		NodeChecks:    spec.NodeChecks,
		ServiceChecks: spec.ServiceChecks,
		RenewEvery:    renew,
	}
	if len(p.ServiceChecks) == 0 {
		p.ServiceChecks = nil
	}
	if len(errs) == 0 {
		errs = validation.AsFieldErrors(p.Validate())
	}
	if len(errs) > 0 {
		return lockmodel.Profile{}, recordError(RecordKindSessionDefaults, spec.Name, errs)
	}
	return p.Resolve(), nil
}

// EncodeACLPolicyRecord renders the registry record of s. It refuses an
// invalid spec.
func EncodeACLPolicyRecord(s ACLPolicySpec) ([]byte, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if s.Datacenters == nil {
		s.Datacenters = []string{}
	}
	return encodeRecord(RecordKindACLPolicy, s.Name, s)
}

// DecodeACLPolicyRecord parses and validates an "acl_policy" record. An empty
// datacenters list comes back as nil.
func DecodeACLPolicyRecord(data []byte) (ACLPolicySpec, error) {
	var s ACLPolicySpec
	if err := decodeRecord(data, RecordKindACLPolicy, &s, func() string { return s.Name }); err != nil {
		return ACLPolicySpec{}, err
	}
	if len(s.Datacenters) == 0 {
		s.Datacenters = nil
	}
	if err := s.Validate(); err != nil {
		return ACLPolicySpec{}, recordError(RecordKindACLPolicy, s.Name, validation.AsFieldErrors(err))
	}
	return s, nil
}

// DecodeRecord parses the envelope of any registry record: a JSON object with
// a schema_version this package reads and a known kind. The spec is left raw.
func DecodeRecord(data []byte) (Record, error) {
	var r Record
	if err := json.Unmarshal(data, &r); err != nil {
		return Record{}, fmt.Errorf("registry record is not a JSON object: %w", err)
	}
	switch {
	case r.SchemaVersion > RecordSchemaVersion:
		return Record{}, fmt.Errorf("%w: %s record %q has schema_version %d and this consullock reads up to %d; upgrade consullock",
			ErrNewerSchema, r.Kind, r.Name, r.SchemaVersion, RecordSchemaVersion)
	case r.SchemaVersion < 1:
		return Record{}, fmt.Errorf("registry record %q has schema_version %d; a consullock record has schema_version 1 to %d",
			r.Name, r.SchemaVersion, RecordSchemaVersion)
	case RegistryKindOf(r.Kind) == "":
		return Record{}, fmt.Errorf("registry record %q has kind %q; want one of %q, %q, %q, %q, %q",
			r.Name, r.Kind, RecordKindLock, RecordKindSessionDefaults, RecordKindACLPolicy, RecordKindRunLedger, RecordKindPause)
	case len(bytes.TrimSpace(r.Spec)) == 0 || bytes.Equal(bytes.TrimSpace(r.Spec), []byte("null")):
		return Record{}, fmt.Errorf("%s record %q has no spec", r.Kind, r.Name)
	}
	return r, nil
}

func decodeRecord(data []byte, kind string, spec any, specName func() string) error {
	r, err := DecodeRecord(data)
	if err != nil {
		return err
	}
	if r.Kind != kind {
		return fmt.Errorf("registry record %q is a %q record, not %q", r.Name, r.Kind, kind)
	}
	if err := json.Unmarshal(r.Spec, spec); err != nil {
		return fmt.Errorf("%s record %q has an unreadable spec: %w", kind, r.Name, err)
	}
	if n := specName(); n != r.Name {
		return fmt.Errorf("%s record %q has a spec named %q; the two names must match", kind, r.Name, n)
	}
	return nil
}

func recordError(kind, name string, errs validation.FieldErrors) error {
	return fmt.Errorf("%s record %q is invalid: %w", kind, name, errs)
}

func parseRecordDuration(field, s string, absent time.Duration) (time.Duration, error) {
	if s == "" {
		return absent, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, &validation.FieldError{Field: field, Value: s, Allowed: `a duration such as "15s" or "1m30s"`}
	}
	return d, nil
}

func encodeRecord(kind, name string, spec any) ([]byte, error) {
	raw, err := marshal(spec)
	if err != nil {
		return nil, err
	}
	return marshal(Record{
		SchemaVersion: RecordSchemaVersion,
		Kind:          kind,
		Name:          name,
		Spec:          raw,
		ManagedBy:     ManagedBy,
	})
}

// marshal is json.Marshal without HTML escaping, so descriptions and rules
// read as written in `consul kv get`.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
