// Command devagent runs the same Consul dev agent the tests use (ACLs on,
// default_policy = "deny", known management token) until interrupted, and
// writes an env file with CONSUL_HTTP_ADDR and CONSUL_HTTP_TOKEN for
// scripts such as `make demo`.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

func main() {
	envFile := flag.String("env-file", ".demo/agent.env", "where to write the CONSUL_* variables (mode 0600)")
	node := flag.String("node", "worker-node-1", "node name of the agent")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	agent, err := testenv.Start(ctx, testenv.Options{NodeName: *node})
	if err != nil {
		log.Fatalf("devagent: %v", err)
	}
	defer agent.Stop()
	env := fmt.Sprintf("CONSUL_HTTP_ADDR=%s\nCONSUL_HTTP_TOKEN=%s\nCONSUL_NODE=%s\n", agent.Addr, agent.ManagementToken, agent.NodeName)
	if err := os.WriteFile(*envFile+".tmp", []byte(env), 0o600); err != nil {
		log.Fatalf("devagent: %v", err)
	}
	if err := os.Rename(*envFile+".tmp", *envFile); err != nil {
		log.Fatalf("devagent: %v", err)
	}
	log.Printf("devagent: consul %s at http://%s (node %s, ACLs default deny); stop with SIGTERM", agent.Bin, agent.Addr, agent.NodeName)
	<-ctx.Done()
}
