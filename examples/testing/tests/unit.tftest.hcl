# No Consul: the provider is mocked. Values the real provider computes at
# plan time (key, rules, worst_case_gap, registry_key) are random strings
# under a mock unless mock_resource gives them; attribute validation and
# the provider's functions still run for real.

mock_provider "consullock" {
  mock_resource "consullock_lock" {
    defaults = {
      key          = "jobs/nightly-report/.lock"
      registry_key = "consul-lock/locks/nightly-report"
    }
  }
  mock_resource "consullock_session_defaults" {
    defaults = {
      worst_case_gap = "35s"
      registry_key   = "consul-lock/session-defaults/nightly-report"
    }
  }
}

run "mocked_values_are_the_defaults" {
  command = plan

  assert {
    condition     = output.worst_case_gap == "35s" && output.key == "jobs/nightly-report/.lock"
    error_message = "the mock's defaults"
  }
}

run "an_empty_node_prefix_is_refused" {
  command = plan

  variables {
    worker_node_prefix = ""
  }
  # A custom condition (the variable's validation). An error the provider
  # reports, such as an invalid name, cannot be expected: it fails the run.
  expect_failures = [var.worker_node_prefix]
}

run "functions_run_for_real" {
  command = plan

  assert {
    condition     = output.key_by_function == "jobs/${var.name}/.lock" && output.gap_by_function == "35s"
    error_message = "lock_key and worst_case_gap are computed by the provider, not the mock"
  }
}
