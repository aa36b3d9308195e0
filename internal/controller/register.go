package controller

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"strconv"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
)

// The controller's metrics endpoint as a service of the Consul agent it
// talks to (-register-service), so that Prometheus finds every replica with
// consul_sd. The registration is the agent's (PUT
// /v1/agent/service/register): the agent runs the HTTP check and keeps the
// catalog in step; the controller deregisters the service when it stops
// cleanly. The token needs service:write on the name (examples/controller/
// register-service.hcl); without it Consul answers 403 and the controller
// exits 1 naming the permission.

// Registration settings, stated in the controller guide.
const (
	// endpointCheckPath is what the agent's HTTP check calls: a replica
	// whose watches fail is listed critical (consul_sd still finds it).
	endpointCheckPath     = "/readyz"
	endpointCheckInterval = 10 * time.Second
	endpointCheckTimeout  = 5 * time.Second
	// endpointReapAfter: after a crash (no deregistration), the agent
	// removes the service once its check has been critical this long.
	endpointReapAfter = time.Minute
	// endpointRetryEvery paces retries of a registration that failed for
	// a transient reason (the agent starting, no cluster leader).
	endpointRetryEvery = 2 * time.Second
)

// serviceName is what -register-service accepts: a name usable in DNS
// (<name>.service.consul), as Consul recommends.
var serviceName = regexp.MustCompile(`^[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?$`)

// checkServiceName explains a -register-service value Consul's DNS could
// not serve.
func checkServiceName(name string) error {
	if !serviceName.MatchString(name) {
		return fmt.Errorf("-register-service: %q is not a valid service name: use 1 to 63 letters, digits and dashes, not starting or ending with a dash (a DNS label)", name)
	}
	return nil
}

// endpointRegistration is the service for the endpoint listening at
// listen (the listener's own address, so port 0 is resolved). Its address
// is advertise when set, else the listen IP when it is a specific one; with
// neither (-listen :9464) it is empty, which Consul and consul_sd read as
// the node's address. The agent's check calls the same host, or loopback
// when it is empty (the agent is the local one). hostname makes the ID
// unique among replicas that register through the same agent (a server,
// agentless).
func endpointRegistration(name, advertise string, listen *net.TCPAddr, hostname string) *api.AgentServiceRegistration {
	host := advertise
	if host == "" && !listen.IP.IsUnspecified() {
		host = listen.IP.String()
	}
	checkHost := host
	if checkHost == "" {
		checkHost = "127.0.0.1"
	}
	port := strconv.Itoa(listen.Port)
	return &api.AgentServiceRegistration{
		ID:      name + "-" + hostname + "-" + port,
		Name:    name,
		Address: host,
		Port:    listen.Port,
		Meta:    map[string]string{"metrics_path": "/metrics"},
		Check: &api.AgentServiceCheck{
			Name:                           "consullock controller ready",
			HTTP:                           "http://" + net.JoinHostPort(checkHost, port) + endpointCheckPath,
			Interval:                       endpointCheckInterval.String(),
			Timeout:                        endpointCheckTimeout.String(),
			DeregisterCriticalServiceAfter: endpointReapAfter.String(),
		},
	}
}

// registerEndpoint registers reg with the agent, retrying transient
// failures until ctx ends. A refusal (permission denied, invalid input) is
// returned at once: retrying cannot help.
func registerEndpoint(ctx context.Context, client *consul.Client, reg *api.AgentServiceRegistration, log *slog.Logger) error {
	op := fmt.Sprintf("register service %q (id %s) with the agent", reg.Name, reg.ID)
	for {
		err := client.Agent().ServiceRegisterOpts(reg, api.ServiceRegisterOpts{}.WithContext(ctx))
		if err == nil {
			return nil
		}
		e := consul.Classify(op, err)
		if e.Kind != consul.KindTransient || ctx.Err() != nil {
			return e
		}
		log.Warn("registering the metrics endpoint failed; retrying", "service", reg.Name, "error", e.Error())
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(endpointRetryEvery):
		}
	}
}

// deregisterEndpoint removes the service on a clean stop, within timeout.
func deregisterEndpoint(client *consul.Client, id string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := client.Agent().ServiceDeregisterOpts(id, (&api.QueryOptions{}).WithContext(ctx)); err != nil {
		return consul.Classify("deregister service "+id, err)
	}
	return nil
}
