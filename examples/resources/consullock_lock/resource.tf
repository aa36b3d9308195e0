resource "consullock_session_defaults" "fast" {
  name       = "fast"
  ttl        = "15s"
  lock_delay = "15s"
}

resource "consullock_session_defaults" "workers" {
  name       = "workers"
  ttl        = "30s"
  lock_delay = "20s"
  behavior   = "delete"
}

# A mutex: `consul lock jobs/nightly-report ./report.sh` (or api.Lock, or
# `consullock run -lock nightly-report -- ./report.sh`) acquires
# jobs/nightly-report/.lock.
resource "consullock_lock" "nightly_report" {
  name             = "nightly-report"
  prefix           = "jobs/nightly-report"
  session_defaults = consullock_session_defaults.fast.name
  max_hold         = "2h"
  description      = "Nightly billing report; runs on exactly one worker"
}

# A semaphore: at most three thumbnail workers at once,
# `consul lock -n 3 jobs/thumbnailers ./work.sh`.
resource "consullock_lock" "thumbnailers" {
  name             = "thumbnailers"
  prefix           = "jobs/thumbnailers"
  limit            = 3
  session_defaults = consullock_session_defaults.workers.name
}

# A mutex on a raw key that an application acquires through the HTTP API.
# Its leader must always be running somewhere: `consullock status` exits 1
# and the ConsulLockUnheld alert fires when it has no holder.
resource "consullock_lock" "billing_leader" {
  name        = "billing-leader"
  prefix      = "service/billing"
  key         = "service/billing/leader"
  always_held = true
}

# Run once per day, however many workers are triggered: each worker's timer
# runs `consullock run -lock nightly-ingest -- ./ingest.sh` at 02:05 UTC; one
# runs the job, the others find the day's run succeeded and exit 0. A failed
# or crashed run is attempted again by the next worker, three times at most.
# Every worker is triggered at once, so the waiters queue: a release wakes
# one of them instead of all. Their policy needs
# consullock_acl_policy's queue_prefixes = ["jobs/nightly-ingest"].
resource "consullock_lock" "nightly_ingest" {
  name             = "nightly-ingest"
  prefix           = "jobs/nightly-ingest"
  session_defaults = consullock_session_defaults.fast.name
  waiters          = "queue"
  run_once = {
    period       = "24h"
    offset       = "2h" # run IDs are 02:00 UTC each day: triggers fire well inside the slot
    max_attempts = 3
    keep         = 30
  }
}

# An active/passive scheduler found through Consul DNS: whichever worker runs
# `consullock run -lock scheduler -- ./scheduler` is `scheduler.service.consul`
# (SRV port 7070, meta fencing_token) while, and only while, it holds the lock.
# Its workers' policy needs service "scheduler" write:
# consullock_acl_policy's holder_services = ["scheduler"].
resource "consullock_lock" "scheduler" {
  name             = "scheduler"
  prefix           = "service/scheduler"
  session_defaults = consullock_session_defaults.fast.name
  always_held      = true
  holder_service = {
    name = "scheduler"
    tags = ["leader"]
    port = 7070
    meta = { team = "platform" }
  }
}

output "nightly_report_key" {
  value = consullock_lock.nightly_report.key # "jobs/nightly-report/.lock"
}
