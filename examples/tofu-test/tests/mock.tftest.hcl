# No Consul needed: the provider is mocked. Its functions still run for
# real, so the outputs computed by them are the real values; a resource's
# own computed attributes (key, rules, worst_case_gap) are random strings
# unless a mock_resource gives them defaults.
mock_provider "consullock" {
  mock_resource "consullock_acl_policy" {
    defaults = {
      rules = "(mocked)"
    }
  }
}

run "plan_without_consul" {
  command = plan

  assert {
    condition     = output.key == "jobs/nightly-report/.lock"
    error_message = "The lock key is ${output.key}."
  }

  assert {
    condition     = output.worst_case_gap == "35s"
    error_message = "worst_case_gap is ${output.worst_case_gap}, want 2 x ttl + lock_delay = 35s."
  }
}

run "another_job" {
  command = plan

  variables {
    job = "weekly-cleanup"
  }

  assert {
    condition     = output.key == "jobs/weekly-cleanup/.lock"
    error_message = "The lock key is ${output.key}."
  }
}
