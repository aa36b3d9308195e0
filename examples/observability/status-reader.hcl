# ACL rules for `consullock status` (read-only), as `consullock status -print-rules`
# renders them before any lock is declared. Once locks are declared, run
# `consullock status -print-rules` with a token that may read the registry to get
# them narrowed to the prefixes status lists instead of key_prefix "".
# Replace "consul-lock" if you set -registry-prefix.

key_prefix "" {
  policy = "read"
}

key_prefix "consul-lock/" {
  policy = "read"
}

session_prefix "" {
  policy = "read"
}
