// Package holdersvc holds the rules of a lock's holder service: a lock's
// holder_service puts each holder into Consul's catalog (and DNS,
// `<name>.service.consul`) while, and only while, it holds. The rules live
// here once: what a valid declaration is (Service and its Validate, the
// name, tag, meta key and node rules), the instance a holder registers
// (Instance: its service and check IDs, the meta the runner writes), the
// TTL of the check that takes the instance out of DNS when its holder stops
// renewing (Check), how a runner registers it (Via) and when another
// holder's instance is stale (InstanceStale).
//
// It is pure: it imports nothing from Consul or Terraform, and not
// lockmodel, which imports it (a Lock's HolderService is a *Service). The
// check's numbers come from the session rules: lockmodel.NewHolderCheck
// resolves a profile into a Timing. Registering the instance is
// internal/store's; the runner and the agentless registration build the
// same Instance.
package holdersvc
