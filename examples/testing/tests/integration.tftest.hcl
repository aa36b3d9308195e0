# Against a real Consul agent (CONSUL_HTTP_ADDR, CONSUL_HTTP_TOKEN): the
# values a reviewer sees at plan time, then an apply and what it created.
# tofu test destroys what the runs created when it ends.

run "plan_shows_the_key_and_the_gap" {
  command = plan

  assert {
    condition     = consullock_lock.job.key == "jobs/${var.name}/.lock"
    error_message = "the lock key is known at plan time"
  }
  assert {
    condition     = consullock_session_defaults.job.worst_case_gap == "35s"
    error_message = "worst_case_gap is 2 x ttl + lock_delay"
  }
  assert {
    condition     = output.gap_by_function == consullock_session_defaults.job.worst_case_gap
    error_message = "the worst_case_gap function agrees with the profile"
  }
  assert {
    condition     = strcontains(consullock_acl_policy.workers.rules, "key \"jobs/${var.name}/.lock\"")
    error_message = "the rules grant the lock key"
  }
}

run "apply" {
  assert {
    condition     = output.key == "jobs/${var.name}/.lock"
    error_message = "the applied key"
  }
  assert {
    condition     = consullock_acl_policy.workers.id != ""
    error_message = "Consul assigned the policy an ID"
  }
}
