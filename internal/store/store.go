// Package store keeps consullock's records in Consul: the declaration
// registry, lock keys and their transactions, the run ledger, holder
// services, ACL objects, fences and pauses. Every write of a record goes
// through it. It sits on internal/consul, the HTTP client (settings,
// retries, error classification, the blocking-query follower), and above
// the pure rules (lockmodel, ledger, aclrules).
package store

import "github.com/consullock/terraform-provider-consullock/internal/consul"

// Store is the record store over one Consul client.
type Store struct {
	*consul.Client
}

// New returns the store over c.
func New(c *consul.Client) Store { return Store{Client: c} }
