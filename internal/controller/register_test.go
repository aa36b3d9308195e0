package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// registeredName is the service name examples/controller/register-service.hcl
// grants.
const registeredName = "consullock-controller"

// TestEndpointRegistration_addresses: the address Consul lists and the
// one its check calls, from -listen and -service-address.
func TestEndpointRegistration_addresses(t *testing.T) {
	cases := []struct {
		listen, advertise, wantAddress, wantCheck string
	}{
		{listen: "127.0.0.1:9464", wantAddress: "127.0.0.1", wantCheck: "http://127.0.0.1:9464/readyz"},
		// Any address: the node's address for Prometheus, loopback for the local agent's check.
		{listen: "0.0.0.0:9464", wantAddress: "", wantCheck: "http://127.0.0.1:9464/readyz"},
		{listen: "[::]:9464", wantAddress: "", wantCheck: "http://127.0.0.1:9464/readyz"},
		{listen: "0.0.0.0:9464", advertise: "10.0.0.7", wantAddress: "10.0.0.7", wantCheck: "http://10.0.0.7:9464/readyz"},
		{listen: "[::1]:9464", wantAddress: "::1", wantCheck: "http://[::1]:9464/readyz"},
	}
	for _, tc := range cases {
		addr, err := net.ResolveTCPAddr("tcp", tc.listen)
		if err != nil {
			t.Fatal(err)
		}
		reg := endpointRegistration(registeredName, tc.advertise, addr, "host-a")
		if reg.Address != tc.wantAddress || reg.Check.HTTP != tc.wantCheck || reg.Port != 9464 {
			t.Errorf("-listen %s -service-address %q: address %q port %d check %s, want %q 9464 %s",
				tc.listen, tc.advertise, reg.Address, reg.Port, reg.Check.HTTP, tc.wantAddress, tc.wantCheck)
		}
		if reg.ID != "consullock-controller-host-a-9464" || reg.Meta["metrics_path"] != "/metrics" || reg.Check.DeregisterCriticalServiceAfter != "1m0s" {
			t.Errorf("id %q meta %v reap after %q", reg.ID, reg.Meta, reg.Check.DeregisterCriticalServiceAfter)
		}
	}
}

// TestRegisterService_badFlags: refused before Consul is contacted, with
// the flag, the value and what is allowed.
func TestRegisterService_badFlags(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"-register-service", "consullock controller"}, `-register-service: "consullock controller" is not a valid service name: use 1 to 63 letters, digits and dashes`},
		{[]string{"-register-service", "-dash-first", "-listen", ":0"}, `"-dash-first" is not a valid service name`},
		{[]string{"-register-service", registeredName, "-listen", ""}, `-register-service "consullock-controller" needs the endpoint: set -listen`},
		{[]string{"-service-address", "10.0.0.7"}, "-service-address is only used with -register-service"},
	}
	for _, tc := range cases {
		var stderr strings.Builder
		if code := run(context.Background(), tc.args, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("controller %q: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}

// TestRegisterService_catalogWhileRunning runs the controller program with
// -register-service against the real agent, with the shipped rules: the
// endpoint is in the catalog with the listener's address and port, its
// check calls /readyz and passes, and a clean stop removes it. Without
// register-service.hcl, Consul answers 403 and the controller exits 1
// naming the permission.
func TestRegisterService_catalogWhileRunning(t *testing.T) {
	h := newHarness(t, agent)
	repair := shippedRules(t, "repair.hcl")

	denied, err := agent.MintToken(h.name("no-service-write"), repair, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("CONSUL_HTTP_ADDR", agent.Addr)
	t.Setenv("CONSUL_HTTP_TOKEN", denied.SecretID)
	args := []string{"-mode", "repair", "-no-leader-election", "-registry-prefix", h.registry, "-listen", "127.0.0.1:0", "-register-service", registeredName}
	logs := &logBuffer{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if code := run(ctx, args, logs); code != 1 {
		t.Fatalf("with the repair rules only: exit %d, want 1\n%s", code, logs)
	}
	if refused := logs.lines("registering the metrics endpoint failed", `lacks \"service:write\" on \"consullock-controller\" (HTTP 403)`); len(refused) != 1 {
		t.Fatalf("with the repair rules only, no log line names the missing service:write:\n%s", logs)
	}
	t.Logf("without register-service.hcl: %s", logs.lines("registering the metrics endpoint failed")[0])

	allowed, err := agent.MintToken(h.name("service-write"), repair+shippedRules(t, "register-service.hcl"), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("CONSUL_HTTP_TOKEN", allowed.SecretID)
	logs = &logBuffer{}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	exited := make(chan int, 1)
	go func() { exited <- run(runCtx, args, logs) }()

	var port int
	eventually(t, 20*time.Second, func() error {
		for _, l := range logs.lines("metrics endpoint registered") {
			var ev struct{ Port int }
			if err := json.Unmarshal([]byte(l), &ev); err == nil {
				port = ev.Port
				return nil
			}
		}
		select {
		case code := <-exited:
			t.Fatalf("controller exited %d before registering:\n%s", code, logs)
		default:
		}
		return fmt.Errorf("the controller has not registered its endpoint")
	})
	health := agent.Client().Health()
	var entry *api.ServiceEntry
	// The agent runs the first check within one interval (10s).
	eventually(t, 45*time.Second, func() error {
		entries, _, err := health.Service(registeredName, "", true, &api.QueryOptions{RequireConsistent: true})
		if err != nil {
			return err
		}
		if len(entries) != 1 {
			return fmt.Errorf("passing instances: %d", len(entries))
		}
		entry = entries[0]
		return nil
	})
	if s := entry.Service; s.Address != "127.0.0.1" || s.Port != port || s.Meta["metrics_path"] != "/metrics" || entry.Node.Node != agent.NodeName {
		t.Errorf("catalog entry %s on node %s at %s:%d meta %v; want 127.0.0.1:%d on %s", s.ID, entry.Node.Node, s.Address, s.Port, s.Meta, port, agent.NodeName)
	}
	for _, c := range entry.Checks {
		if c.ServiceID == entry.Service.ID && (c.Status != api.HealthPassing || c.Type != "http") {
			t.Errorf("check %q: %s %s, want a passing http check", c.Name, c.Type, c.Status)
		}
	}
	t.Logf("registered: %s at %s:%d, check passing", entry.Service.ID, entry.Service.Address, entry.Service.Port)

	stop()
	if code := <-exited; code != 0 {
		t.Fatalf("controller exit %d after a clean stop, want 0\n%s", code, logs)
	}
	eventually(t, 10*time.Second, func() error {
		entries, _, err := agent.Client().Catalog().Service(registeredName, "", &api.QueryOptions{RequireConsistent: true})
		if err != nil {
			return err
		}
		if len(entries) != 0 {
			return fmt.Errorf("%d instances still in the catalog after the stop", len(entries))
		}
		return nil
	})
	if len(logs.lines("metrics endpoint deregistered")) != 1 {
		t.Errorf("no deregistration logged:\n%s", logs)
	}
}

// TestRegisterService_retriesUntilTheAgentAnswers: the agent refuses
// connections when the controller starts; the registration is retried
// and lands once the agent answers.
func TestRegisterService_retriesUntilTheAgentAnswers(t *testing.T) {
	h := newHarness(t, agent)
	tok, err := agent.MintToken(h.name("retry"), shippedRules(t, "repair.hcl")+shippedRules(t, "register-service.hcl"), 0)
	if err != nil {
		t.Fatal(err)
	}
	// An address nobody listens on yet: connections are refused.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	t.Setenv("CONSUL_HTTP_ADDR", addr)
	t.Setenv("CONSUL_HTTP_TOKEN", tok.SecretID)
	logs := &logBuffer{}
	ctx, stop := context.WithTimeout(context.Background(), 2*time.Minute)
	defer stop()
	exited := make(chan int, 1)
	go func() {
		exited <- run(ctx, []string{"-mode", "repair", "-no-leader-election", "-registry-prefix", h.registry,
			"-listen", "127.0.0.1:0", "-register-service", registeredName}, logs)
	}()
	eventually(t, 30*time.Second, func() error {
		if len(logs.lines("registering the metrics endpoint failed; retrying")) == 0 {
			return fmt.Errorf("no retry logged yet")
		}
		return nil
	})
	select {
	case code := <-exited:
		t.Fatalf("controller exited %d while the agent refused connections:\n%s", code, logs)
	default:
	}
	// The agent becomes reachable at that address.
	link, err := testenv.NewLink(addr, agent.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer link.Close()
	eventually(t, 30*time.Second, func() error {
		entries, _, err := agent.Client().Catalog().Service(registeredName, "", &api.QueryOptions{RequireConsistent: true})
		if err != nil {
			return err
		}
		if len(entries) != 1 {
			return fmt.Errorf("%d instances in the catalog", len(entries))
		}
		return nil
	})
	t.Logf("registered after %d refused attempts", len(logs.lines("registering the metrics endpoint failed; retrying")))
	stop()
	if code := <-exited; code != 0 {
		t.Fatalf("controller exit %d after a clean stop, want 0\n%s", code, logs)
	}
	eventually(t, 10*time.Second, func() error {
		entries, _, err := agent.Client().Catalog().Service(registeredName, "", &api.QueryOptions{RequireConsistent: true})
		if err != nil || len(entries) != 0 {
			return fmt.Errorf("%d instances still in the catalog after the stop (%v)", len(entries), err)
		}
		return nil
	})
}
