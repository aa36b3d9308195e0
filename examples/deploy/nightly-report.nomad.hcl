# Nomad job: the nightly report on every worker node at 02:00 UTC, run once
# per launch by the consullock lock "nightly-report" (declared with run_once,
# README.md). `sysbatch` places one allocation per eligible node, which is
# the "deployed on several nodes" half of the pattern; the lock and its run
# ledger are the "runs exactly once" half: one allocation runs the report,
# the others exit 0 as soon as it has succeeded, and take over the run if it
# fails or its node dies. It also holds across Nomad regions and against a
# disconnected node's allocation that is still running while Nomad
# reschedules it.
#
# The run ID is the periodic launch's own ID (NOMAD_JOB_ID is
# "nightly-report/periodic-<launch time>", the same in every allocation of
# one launch), so no node computes it from its own clock.
#
#   nomad var put nomad/jobs/nightly-report consul_token=<worker_token>
#   nomad job run nightly-report.nomad.hcl
job "nightly-report" {
  datacenters = ["dc1"]
  type        = "sysbatch"

  periodic {
    crons            = ["0 2 * * *"]
    time_zone        = "UTC"
    prohibit_overlap = true
  }

  # Sessions are created on the Consul node of the agent the runner talks
  # to, and the workers' policy allows sessions only on nodes whose names
  # start with its session_node_prefixes ("worker-" in the quickstart).
  constraint {
    attribute = "${node.unique.name}"
    operator  = "regexp"
    value     = "^worker-"
  }

  group "report" {
    # One runner per node and launch: the run ledger retries a failed
    # attempt on the nodes still waiting (up to run_once.max_attempts), so
    # Nomad must not restart or reschedule on top of it.
    restart {
      attempts = 0
      mode     = "fail"
    }

    reschedule {
      attempts  = 0
      unlimited = false
    }

    task "report" {
      driver = "exec"

      config {
        command = "/bin/sh"
        # The runner runs as the shell's child. A non-interactive shell does
        # not pass SIGTERM on, so the trap does: on `nomad alloc stop` or a
        # drain the runner forwards it to the job, records the outcome with
        # the release and destroys its session. Exit 0: this node ran the
        # report, or another did (the log names it). Every other code is
        # the runner's or the job's (README.md) and fails the allocation.
        # -timeout is the period (the -timeout rule with run once).
        args = ["-c", <<-EOT
          /usr/bin/consullock run -lock nightly-report -run-id "$${NOMAD_JOB_ID##*/}" \
            -timeout 24h -grace 10s -- /usr/local/bin/nightly-report --since yesterday &
          runner=$!
          trap 'kill -TERM "$runner" 2>/dev/null' TERM INT
          while :; do
            wait "$runner"; rc=$?
            kill -0 "$runner" 2>/dev/null || break
          done
          exit "$rc"
        EOT
        ]
      }

      # The local Consul agent; with the exec driver the task shares the
      # host's network.
      env {
        CONSUL_HTTP_ADDR = "127.0.0.1:8500"
      }

      # The workers' token (consullock_acl_token, output worker_token) from
      # Nomad Variables, as an environment file that only this task sees.
      template {
        data        = <<-EOT
          CONSUL_HTTP_TOKEN={{ with nomadVar "nomad/jobs/nightly-report" }}{{ .consul_token }}{{ end }}
        EOT
        destination = "secrets/consul.env"
        env         = true
      }

      # SIGTERM first (see the trap above); SIGKILL after kill_timeout,
      # which must leave the job time to stop: more than the runner's -grace.
      kill_signal  = "SIGTERM"
      kill_timeout = "30s"

      resources {
        cpu    = 200
        memory = 256
      }
    }
  }
}
