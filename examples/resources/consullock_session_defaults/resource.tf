# Sessions for jobs that must fail over quickly. If a holder crashes, Consul
# invalidates its session after about 2 x ttl and keeps the lock unacquirable
# for lock_delay more: worst_case_gap = 2 x 15s + 15s = "45s", shown at plan.
# lock_delay must exceed what a holder cut off from Consul needs to notice
# and stop its job (renew_every + renewal timeout + the runner's -grace +
# 1s): here 5s + 2s + 5s + 1s = 13s.
resource "consullock_session_defaults" "fast" {
  name        = "fast"
  ttl         = "15s"
  lock_delay  = "15s"
  behavior    = "release"
  node_checks = ["serfHealth"]
}

# Semaphore holders (api.Semaphore, `consul lock -n N`) use behavior "delete",
# and these are also invalidated when their service's health check fails.
resource "consullock_session_defaults" "workers" {
  name           = "workers"
  ttl            = "30s"
  lock_delay     = "20s"
  behavior       = "delete"
  service_checks = [{ id = "service:thumbnailer" }]
}

output "fast_failover_worst_case" {
  value = consullock_session_defaults.fast.worst_case_gap
}
