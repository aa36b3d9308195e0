// Package ledger holds the pure rules of run once: a lock's run_once
// declaration (RunOnce) and its validation; the run ledger (Ledger: runs,
// attempts and their outcomes) with the begin, finish, release and prune
// decisions; schedules and slots (Schedule, RunSlot, Trigger, MissedSlots,
// BackfillSlots); retries, max_runtime and kept output (AttemptPolicy); and
// overlap (DecideOverlap, Skip, Replace).
//
// It does no I/O and imports nothing from Consul or Terraform. The ledger's
// record codec (EncodeLedger, DecodeLedger) is package record's, with the
// other registry records; lockmodel and record import this package, never
// the reverse.
package ledger
