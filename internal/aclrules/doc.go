// Package aclrules holds consullock's ACL rules: it renders the
// least-privilege policy of consullock_acl_policy from lock inputs
// (RenderRules, ReadOnlyRules), and parses and normalises any rules text
// Consul accepts into one canonical form (NormalizeRules), so that live
// rules compare semantically with the declared ones.
//
// It sits above lockmodel, whose key, name and field-error conventions it
// uses, and like lockmodel it imports nothing from Consul's API or Terraform.
package aclrules
