# Who holds it now (a consistent read: fails without a cluster leader).
data "consullock_lock" "nightly_report" {
  key = "jobs/nightly-report/.lock"
}

output "nightly_report_holder" {
  value = data.consullock_lock.nightly_report.held ? {
    node          = data.consullock_lock.nightly_report.node
    session       = data.consullock_lock.nightly_report.session
    fencing_token = data.consullock_lock.nightly_report.fencing_token
    value         = data.consullock_lock.nightly_report.value
  } : null
}

# The last run of a run_once lock.
data "consullock_lock" "nightly_ingest" {
  key = "jobs/nightly-ingest/.lock"
}

output "nightly_ingest_last_run" {
  value = data.consullock_lock.nightly_ingest.last_run # null before the first run
}

# A semaphore (`consul lock -n 3 jobs/reindex ...`): its holders.
data "consullock_lock" "reindex" {
  key = "jobs/reindex/.lock"
}

output "reindex_slots" {
  value = data.consullock_lock.reindex.exists ? "${length(data.consullock_lock.reindex.holders)} of ${data.consullock_lock.reindex.limit} slots held" : "no semaphore"
}

# During an outage, read from any server and judge the answer's age.
data "consullock_lock" "nightly_report_stale" {
  key        = "jobs/nightly-report/.lock"
  consistent = false
}

output "nightly_report_stale_age" {
  value = data.consullock_lock.nightly_report_stale.known_leader ? "current" : "leaderless for ${data.consullock_lock.nightly_report_stale.last_contact}"
}
