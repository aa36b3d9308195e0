# Nomad job: the consullock controller, two instances on different hosts.
# They elect a leader through their own Consul lock and only the leader acts
# (docs/guides/controller.md, "High availability"), so Nomad may stop,
# drain or reschedule either at any time.
#
# The metrics endpoint is registered in Consul as the service
# "consullock-controller" on the port "metrics": Prometheus finds every
# instance with consul_sd_configs (docs/guides/observability.md).
#
#   nomad var put nomad/jobs/consullock-controller consul_token=<controller token>
#   nomad job run consullock-controller.nomad.hcl
job "consullock-controller" {
  datacenters = ["dc1"]
  type        = "service"

  group "controller" {
    count = 2

    # Losing one host must leave the other instance.
    constraint {
      operator = "distinct_hosts"
      value    = "true"
    }

    # One instance at a time: the other keeps watching and takes over.
    update {
      max_parallel     = 1
      health_check     = "checks"
      min_healthy_time = "10s"
      healthy_deadline = "2m"
    }

    network {
      port "metrics" {
        to = 9464
      }
    }

    service {
      provider = "consul"
      name     = "consullock-controller"
      port     = "metrics"
      tags     = ["metrics"]

      meta {
        metrics_path = "/metrics"
      }

      # /healthz: the process serves. /readyz (every watch has answered
      # since start and none is failing) gates deployments.
      check {
        name     = "healthz"
        type     = "http"
        path     = "/healthz"
        interval = "10s"
        timeout  = "2s"

        check_restart {
          limit = 3
          grace = "30s"
        }
      }

      check {
        name     = "readyz"
        type     = "http"
        path     = "/readyz"
        interval = "10s"
        timeout  = "2s"
      }
    }

    task "controller" {
      driver = "docker"

      config {
        # Pin the release you run. The image's entrypoint is the consullock
        # binary; it runs as the non-root user 65532.
        image           = "ghcr.io/consullock/consullock:latest"
        args            = ["controller", "-mode", "repair", "-listen", ":9464"]
        ports           = ["metrics"]
        readonly_rootfs = true
        cap_drop        = ["all"]
      }

      env {
        # The client node's Consul agent (or a server's address when the
        # nodes run no agent: docs/guides/agentless.md).
        CONSUL_HTTP_ADDR       = "${attr.unique.network.ip-address}:8500"
        CONSUL_HTTP_TOKEN_FILE = "${NOMAD_SECRETS_DIR}/consul-token"
      }

      # The controller's token (the rules per mode are in the controller
      # guide) from Nomad Variables. From Vault instead (with a vault block):
      #   {{ with secret "secret/data/consullock/controller" }}{{ .Data.data.token }}{{ end }}
      template {
        data        = <<-EOT
          {{ with nomadVar "nomad/jobs/consullock-controller" }}{{ .consul_token }}{{ end }}
        EOT
        destination = "secrets/consul-token"
        perms       = "0440"
        uid         = 65532
        gid         = 65532
        change_mode = "restart"
      }

      # SIGTERM: the instance stops acting, releases the leader lock and
      # destroys its session, in milliseconds.
      kill_signal  = "SIGTERM"
      kill_timeout = "15s"

      resources {
        cpu    = 100
        memory = 128
      }
    }
  }
}
