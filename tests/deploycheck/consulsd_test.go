package deploycheck

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/consullock/terraform-provider-consullock/internal/controller"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// TestPrometheusConsulSD_findsTheRegisteredController: the observability
// guide's scrape configuration (examples/controller/prometheus.yml) in a
// real Prometheus, against a real agent, finds a controller started with
// -listen :0 -register-service consullock-controller and the shipped
// rules (repair +
// register-service.hcl), scrapes it with the check's health as a label,
// and drops it once the controller has stopped cleanly. Prometheus's token
// has only the rules the example's comment names.
func TestPrometheusConsulSD_findsTheRegisteredController(t *testing.T) {
	promBin, err := testenv.ToolPath("PROMETHEUS_BIN", "prometheus")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	agent, err := testenv.Start(ctx, testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Stop()
	rules := func(files ...string) string {
		var b strings.Builder
		for _, f := range files {
			data, err := os.ReadFile(filepath.Join(examplesDir, "controller", f))
			if err != nil {
				t.Fatal(err)
			}
			b.Write(data)
		}
		return b.String()
	}
	ctl, err := agent.MintToken("consulsd-controller", rules("repair.hcl", "register-service.hcl"), 0)
	if err != nil {
		t.Fatal(err)
	}
	prom, err := agent.MintToken("consulsd-prometheus", scrapeTokenRules(t), 0)
	if err != nil {
		t.Fatal(err)
	}

	t.Setenv("CONSUL_HTTP_ADDR", agent.Addr)
	t.Setenv("CONSUL_HTTP_TOKEN", ctl.SecretID)
	ctlCtx, stopController := context.WithCancel(ctx)
	defer stopController()
	exited := make(chan int, 1)
	go func() {
		exited <- controller.Main(ctlCtx, []string{"-mode", "repair", "-no-leader-election", "-listen", ":0",
			"-registry-prefix", "consulsd-test", "-register-service", "consullock-controller"})
	}()

	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "consul-token")
	if err := os.WriteFile(tokenFile, []byte(prom.SecretID), 0o600); err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgFile, scrapeConfigFor(t, agent.Addr, tokenFile), 0o600); err != nil {
		t.Fatal(err)
	}
	promAddr := freeAddr(t)
	promLog := &lockedLog{}
	cmd := exec.Command(promBin, "--config.file="+cfgFile, "--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+promAddr)
	cmd.Stdout, cmd.Stderr = promLog, promLog
	// Not the controller's CONSUL_* (set for it above): Prometheus's Consul
	// client would send CONSUL_HTTP_TOKEN instead of its credentials_file.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CONSUL_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus log:\n%s", promLog.String())
		}
	}()

	var up target
	waitUntil(t, 2*time.Minute, "Prometheus to find the controller through consul_sd and scrape it with a passing check", func() bool {
		targets := activeTargets(t, promAddr)
		for _, tg := range targets {
			if tg.Labels["job"] == "consullock-controller" && tg.Health == "up" && tg.Labels["consul_health"] == "passing" {
				up = tg
				return true
			}
		}
		select {
		case code := <-exited:
			t.Fatalf("the controller exited %d", code)
		default:
		}
		return false
	})
	// -listen :0: the service has no address of its own, so Prometheus
	// scrapes the node's (the test agent advertises 127.0.0.1), and the
	// agent's check (passing above) calls loopback.
	if !strings.HasPrefix(up.ScrapeURL, "http://127.0.0.1:") || !strings.HasSuffix(up.ScrapeURL, "/metrics") || up.Labels["node"] != agent.NodeName {
		t.Errorf("target %s labels %v: want http://127.0.0.1:<port>/metrics on node %s", up.ScrapeURL, up.Labels, agent.NodeName)
	}
	t.Logf("Prometheus scrapes %s (labels %v)", up.ScrapeURL, up.Labels)

	stopController()
	if code := <-exited; code != 0 {
		t.Fatalf("controller exit %d after a clean stop, want 0", code)
	}
	waitUntil(t, time.Minute, "Prometheus to drop the stopped controller", func() bool {
		for _, tg := range activeTargets(t, promAddr) {
			if tg.Labels["job"] == "consullock-controller" {
				return false
			}
		}
		return true
	})
}

// scrapeConfigFor is examples/controller/prometheus.yml pointed at the
// test agent and token, scraping every second.
func scrapeConfigFor(t *testing.T, agentAddr, tokenFile string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(examplesDir, "controller", "prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	scrapes, _ := cfg["scrape_configs"].([]any)
	if len(scrapes) != 1 {
		t.Fatalf("want one scrape config, have %d", len(scrapes))
	}
	job, _ := scrapes[0].(map[string]any)
	sds, _ := job["consul_sd_configs"].([]any)
	if len(sds) != 1 {
		t.Fatalf("want one consul_sd_configs entry, have %d", len(sds))
	}
	sd, _ := sds[0].(map[string]any)
	auth, _ := sd["authorization"].(map[string]any)
	if sd["server"] != "127.0.0.1:8500" || auth["credentials_file"] == nil {
		t.Fatalf("consul_sd_configs changed shape: %v", sd)
	}
	sd["server"] = agentAddr
	auth["credentials_file"] = tokenFile
	job["scrape_interval"] = "1s"
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// scrapeTokenRules are the rules the example's comment gives Prometheus's
// token (its lines "#   service ...", "#   node_prefix ...", ...).
func scrapeTokenRules(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(examplesDir, "controller", "prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules []string
	for _, line := range strings.Split(string(raw), "\n") {
		rule, ok := strings.CutPrefix(strings.TrimSpace(line), "#   ")
		if ok && strings.Contains(rule, `policy = "read"`) {
			rules = append(rules, rule)
		}
	}
	if len(rules) == 0 {
		t.Fatal("examples/controller/prometheus.yml names no token rules")
	}
	return strings.Join(rules, "\n")
}

type target struct {
	Labels    map[string]string `json:"labels"`
	ScrapeURL string            `json:"scrapeUrl"`
	Health    string            `json:"health"`
}

func activeTargets(t *testing.T, promAddr string) []target {
	t.Helper()
	resp, err := http.Get("http://" + promAddr + "/api/v1/targets?state=active")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var r struct {
		Data struct {
			ActiveTargets []target `json:"activeTargets"`
		} `json:"data"`
	}
	if json.Unmarshal(body, &r) != nil {
		return nil
	}
	return r.Data.ActiveTargets
}

func waitUntil(t *testing.T, timeout time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", timeout, what)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// lockedLog collects Prometheus's stdout and stderr.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
