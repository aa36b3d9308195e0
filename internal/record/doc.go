// Package record is the versioned registry record codec of consullock: the
// JSON envelope every record shares (Record: schema_version, kind, name,
// spec, managed_by) and, per kind, its spec and its encoder and decoder:
// the declarations (a lock, LockSpec; a session profile,
// SessionProfileSpec; an ACL policy, ACLPolicySpec), a lock's run ledger
// (LedgerSpec, EncodeLedger, DecodeLedger) and its pause (Pause,
// PauseSpec). It names the keys of the records that are not declarations
// (RunLedgerKey, PauseKey) and the record kinds. RECORDS.md in this
// directory is the schema, with an example of each record that the tests
// decode and encode again.
//
// A decoder validates what it reads with the rules of the packages that
// own them (lockmodel for declarations, ledger for runs and attempts), so
// a record that decodes is one a writer could have written. It imports
// lockmodel, ledger and validation, and nothing from Consul or Terraform;
// none of them imports it. Whoever writes or reads a record (the store,
// the provider, the controller, status, the runner, the library) goes
// through it.
package record
