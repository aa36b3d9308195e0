# ACL rules for the Consul token the plan job uses (CONSUL_HTTP_TOKEN in
# plan-review.yml). Read-only: a pull request's plan cannot change Consul,
# and with acl = "read" Consul hides token secrets from it (the provider
# keeps the secret it has in state). A refresh reads the ACL policies and
# tokens, the lock keys and the declaration records; the data source also
# reads the holder's session.
#
#   consul acl policy create -name consullock-plan -rules @plan-reader.hcl
#   consul acl token create -description "CI plan" -policy-name consullock-plan
#
# Narrow key_prefix "" to the registry prefix ("consul-lock/") and the
# prefixes of your locks if the plan job should not read all of KV.
acl = "read"

key_prefix "" {
  policy = "read"
}

session_prefix "" {
  policy = "read"
}
