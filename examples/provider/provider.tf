# Every setting falls back to the Consul CLI's environment variable
# (CONSUL_HTTP_ADDR, CONSUL_HTTP_TOKEN, ...), so this block may be empty.
provider "consullock" {
  address = "https://consul.service.consul:8501"
  ca_file = "/etc/consul.d/ca.pem"

  # Prefer CONSUL_HTTP_TOKEN or token_file over a literal token.
  token_file = "/etc/consullock/token"

  retry = {
    max_attempts = 5
    max_elapsed  = "30s"
  }
}
