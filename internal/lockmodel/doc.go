// Package lockmodel is the pure domain of consullock: lock and session
// declarations, their validation, the failover arithmetic, the key and flag
// conventions shared with Consul's api.Lock and api.Semaphore, ACL rules
// rendering and normalisation, and the versioned registry record format.
//
// It imports nothing from Consul or Terraform so that the provider, the
// controller and the runner apply exactly the same rules.
package lockmodel
