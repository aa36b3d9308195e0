# ACL rules for `consullock controller -mode repair` (the default): recreate
# deleted lock keys, restore flags and semaphore limits, put back ACL rules.
# Replace "consul-lock" if you set -registry-prefix.

key_prefix "consul-lock/" {
  policy = "read"
}

# Leader election key.
key_prefix "consul-lock/controller/" {
  policy = "write"
}

# Recreate lock keys and restore their flags and semaphore limits. Narrow ""
# to the prefixes your locks live under, e.g. key_prefix "service/".
key_prefix "" {
  policy = "write"
}

# Read sessions to judge holders (reported only in this mode); write on the
# controller's own node for its leader session. Narrow "" to the node names
# the controller runs on if you like.
session_prefix "" {
  policy = "write"
}

# Update the rules of declared policies. Consul has no narrower permission
# for editing a policy.
acl = "write"
