# Add to the controller's rules (any mode) when it runs with
# -register-service consullock-controller: register its metrics endpoint
# with the Consul agent (and deregister it on stop). Use the name you pass.

service "consullock-controller" {
  policy = "write"
}
