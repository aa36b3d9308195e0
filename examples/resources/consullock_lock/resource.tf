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

# A mutex, jobs/nightly-report/.lock (`consul lock jobs/nightly-report`).
resource "consullock_lock" "nightly_report" {
  name             = "nightly-report"
  prefix           = "jobs/nightly-report"
  session_defaults = consullock_session_defaults.fast.name
  max_hold         = "2h"
  description      = "Nightly billing report; runs on exactly one worker"
}

# A semaphore: at most three workers at once (`consul lock -n 3`).
resource "consullock_lock" "thumbnailers" {
  name             = "thumbnailers"
  prefix           = "jobs/thumbnailers"
  limit            = 3
  session_defaults = consullock_session_defaults.workers.name
}

# A raw key an application acquires; status and alerts flag it unheld.
resource "consullock_lock" "billing_leader" {
  name        = "billing-leader"
  prefix      = "service/billing"
  key         = "service/billing/leader"
  always_held = true
}

# Once per day on one of the workers triggered at 02:05 UTC; waiters queue
# (their policy needs queue_prefixes = ["jobs/nightly-ingest"]).
resource "consullock_lock" "nightly_ingest" {
  name             = "nightly-ingest"
  prefix           = "jobs/nightly-ingest"
  session_defaults = consullock_session_defaults.fast.name
  waiters          = "queue"
  run_once = {
    period       = "24h"
    offset       = "2h" # slots start at 02:00 UTC
    max_attempts = 3
    keep         = 30
  }
}

# The holder is scheduler.service.consul while, and only while, it holds
# (its policy needs holder_services = ["scheduler"]).
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
