# ACL rules for `consullock controller -mode enforce`: everything repair
# does, plus destroying the sessions of holders that violate their declared
# session profile or max_hold. Replace "consul-lock" if you set
# -registry-prefix.

key_prefix "consul-lock/" {
  policy = "read"
}

key_prefix "consul-lock/controller/" {
  policy = "write"
}

# Narrow "" to the prefixes your locks live under, e.g. key_prefix "service/".
key_prefix "" {
  policy = "write"
}

# Destroying another node's session needs session write on that node:
# narrow "" to the node-name prefixes of your lock holders and the
# controller's own nodes.
session_prefix "" {
  policy = "write"
}

acl = "write"
