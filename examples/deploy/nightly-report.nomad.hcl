# Nomad job: the nightly report on every worker node at 02:00 UTC, run on
# exactly one of them by the consullock lock "nightly-report" (declared in
# examples/quickstart). `sysbatch` places one allocation per eligible node,
# which is the "deployed on several nodes" half of the pattern; the lock is
# the "runs on exactly one" half, and it also holds across Nomad regions and
# against a disconnected node's allocation that is still running while Nomad
# reschedules it.
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
    # One attempt per node and night: a node that lost the race (exit 124)
    # or failed must not try again; the lock already gave the run to one.
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
        # drain the runner forwards it to the job, releases the lock and
        # destroys its session. Exit 124 means another node held the lock
        # longer than -timeout and this node skipped the run: success.
        # Every other code is the runner's or the job's (README.md) and
        # fails the allocation.
        args = ["-c", <<-EOT
          /usr/local/bin/consullock run -lock nightly-report -timeout 2m -grace 10s -- \
            /usr/local/bin/nightly-report --since yesterday &
          runner=$!
          trap 'kill -TERM "$runner" 2>/dev/null' TERM INT
          while :; do
            wait "$runner"; rc=$?
            kill -0 "$runner" 2>/dev/null || break
          done
          [ "$rc" -eq 124 ] && { echo "another node ran nightly-report"; exit 0; }
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
