# Add to the controller's rules (repair or enforce) to let it remove the
# catalog instances that agentless holders of a lock with holder_service
# left behind when nobody took the lock over (a killed holder, no waiter).
# Without these rules the next holder still removes them before its command
# starts; the controller logs once per lock that it cannot.

# The holder_service name of each such lock (service write covers read).
service "nightly-report" {
  policy = "write"
}

# Read the nodes the holders register on: their -node, the
# session_node_prefixes of the workers' consullock_acl_policy.
node_prefix "worker-" {
  policy = "read"
}
