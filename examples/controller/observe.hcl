# ACL rules for `consullock controller -mode observe` (report only).
# Replace "consul-lock" if you set -registry-prefix.

# Read the declarations (the registry).
key_prefix "consul-lock/" {
  policy = "read"
}

# Read the lock keys. Narrow "" to the prefixes your locks live under
# (the `prefix` of each consullock_lock), e.g. key_prefix "service/".
key_prefix "" {
  policy = "read"
}

# Read every session, to judge holders. A holder on a node the token may
# not read is not checked (the controller logs a warning).
session_prefix "" {
  policy = "read"
}

# List and read ACL policies, to detect drifted rules.
acl = "read"

# Leader election: the election key, and sessions on the nodes the
# controller runs on (here: nodes named "controller-..."). Omit both with
# -no-leader-election on a single replica; observe mode is then read-only.
key_prefix "consul-lock/controller/" {
  policy = "write"
}
session_prefix "controller-" {
  policy = "write"
}
