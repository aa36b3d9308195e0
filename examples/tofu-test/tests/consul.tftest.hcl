# Against a real Consul (CONSUL_HTTP_ADDR, and CONSUL_HTTP_TOKEN an operator
# token; a throwaway dev agent is enough): applies the module, checks what
# Consul was given, and destroys it when the file's runs are done.
variables {
  job = "tofu-test-report"
}

run "apply" {
  assert {
    condition     = output.key == "jobs/tofu-test-report/.lock"
    error_message = "The lock key is ${output.key}."
  }

  assert {
    condition     = strcontains(output.rules, "key \"jobs/tofu-test-report/.lock\" {\n  policy = \"write\"\n}")
    error_message = "The workers' rules do not grant write on the lock key:\n${output.rules}"
  }

  assert {
    condition     = consullock_lock.job.registry_key == "consul-lock/locks/tofu-test-report"
    error_message = "The declaration is at ${consullock_lock.job.registry_key}."
  }
}
