// Package clibench measures the provider the way users run it: real
// OpenTofu processes launching the built provider binary (dev_overrides)
// against a real Consul agent, side by side in one run with the CLI's
// built-in terraform_data and with a no-op framework provider of the same
// resource shape (./noop, the framework's floor).
//
//	make bench-cli     (BENCH_SIZES=200,2000 BENCH_RUNS=3,1 by default: runs per size)
//
// Each run creates, plans, updates and destroys; BENCH_PLANS (default 3)
// plans that many times per run, so that a size run once still gets a
// median of several plans, the phase the goals are about.
//
// BENCH_SUBJECTS (e.g. "consullock") limits the run to some subjects while
// developing.
//
// BENCH_BASELINE names a provider binary built from another commit (e.g.
// main: git archive main | tar -x -C /tmp/main && go -C /tmp/main build -o
// /tmp/base/terraform-provider-consullock .): it runs as one more subject,
// "baseline", in the same turns on its own keys, and a second table
// compares consullock with it, so that a change is measured against the
// code before it on the same machine at the same time.
//
// BENCH_OFFICIAL names a terraform-provider-consul binary (the official
// hashicorp/consul provider, built from its source by whoever runs the
// benchmark: the benchmark downloads nothing): it runs as one more subject,
// "official", with one consul_keys resource per lock and per profile, the
// lock's key referring to its profile's as consullock_lock refers to
// consullock_session_defaults, and a third table compares consullock and the
// no-op floor with it, wall and CPU time.
//
// BENCH_PHASES (e.g. "create,plan,destroy") leaves the other phases out.
package clibench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// subject is one provider under measurement.
type subject struct {
	name   string
	config func(locks, profiles int) string
	// provider is the executable whose peak RSS is sampled; "" for built-ins.
	provider string
}

// phases in the order one cycle runs them.
var phases = []string{"create", "plan", "update", "destroy"}

// phaseArgs is the CLI command of each phase.
var phaseArgs = map[string][]string{
	"create":  {"apply", "-auto-approve", "-var", "desc=v1", "-input=false", "-no-color"},
	"plan":    {"plan", "-detailed-exitcode", "-var", "desc=v1", "-input=false", "-no-color"},
	"update":  {"apply", "-auto-approve", "-var", "desc=v2", "-input=false", "-no-color"},
	"destroy": {"destroy", "-auto-approve", "-var", "desc=v2", "-input=false", "-no-color"},
}

func BenchmarkCLI(b *testing.B) {
	sizes := testenv.EnvInts(b, "BENCH_SIZES", []int{200, 2000})
	// BENCH_RUNS=3,1 runs the first size 3 times and the next once (a
	// 2,000-lock cycle of three subjects, plans repeated 3 times, took
	// about 16 minutes here).
	runsPerSize := testenv.EnvInts(b, "BENCH_RUNS", []int{3, 1})
	plansPerRun := testenv.EnvInts(b, "BENCH_PLANS", []int{3})[0]
	ctx := context.Background()

	agent, err := testenv.Start(ctx, testenv.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer agent.Stop()
	counter := newCountingProxy(b, agent.HTTPAddr())

	dir := b.TempDir()
	consullockDir, noopDir, baselineDir, officialDir := filepath.Join(dir, "consullock"), filepath.Join(dir, "noop"), filepath.Join(dir, "baseline"), filepath.Join(dir, "official")
	if err := testenv.BuildProvider(ctx, consullockDir); err != nil {
		b.Fatal(err)
	}
	noopBin := filepath.Join(noopDir, "terraform-provider-noop")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", noopBin, "./noop").CombinedOutput(); err != nil {
		b.Fatalf("building the no-op provider: %v\n%s", err, out)
	}
	rc := filepath.Join(dir, "tofurc")
	if err := os.WriteFile(rc, fmt.Appendf(nil, `provider_installation {
  dev_overrides {
    "registry.opentofu.org/consullock/consullock" = %q
    "registry.opentofu.org/bench/noop" = %q
    "registry.opentofu.org/bench/%s" = %q
    "registry.opentofu.org/hashicorp/consul" = %q
  }
  direct {}
}
`, consullockDir, noopDir, baselineType, baselineDir, officialDir), 0o600); err != nil {
		b.Fatal(err)
	}
	tofuBin, err := testenv.ToolPath("TF_ACC_TERRAFORM_PATH", "tofu")
	if err != nil {
		b.Fatal(err)
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TF_LOG") && !strings.HasPrefix(kv, "CONSUL_") {
			env = append(env, kv)
		}
	}
	env = append(env, "CONSUL_HTTP_ADDR="+counter.url, "CONSUL_HTTP_TOKEN="+agent.ManagementToken)

	subjects := []subject{
		{name: "terraform_data", config: terraformDataConfig},
		{name: "noop framework", config: shapedConfig("noop", "bench/noop", "bench"), provider: noopBin},
		{name: "consullock", config: shapedConfig("consullock", "consullock/consullock", "bench"), provider: filepath.Join(consullockDir, testenv.ProviderFile)},
	}
	if base := os.Getenv("BENCH_BASELINE"); base != "" {
		bin := filepath.Join(baselineDir, "terraform-provider-"+baselineType)
		if err := copyExecutable("BENCH_BASELINE", base, bin); err != nil {
			b.Fatal(err)
		}
		subjects = append(subjects, subject{name: "baseline", config: shapedConfig("consullock", "bench/"+baselineType, "base"), provider: bin})
	}
	if official := os.Getenv("BENCH_OFFICIAL"); official != "" {
		bin := filepath.Join(officialDir, "terraform-provider-consul")
		if err := copyExecutable("BENCH_OFFICIAL", official, bin); err != nil {
			b.Fatal(err)
		}
		subjects = append(subjects, subject{name: "official", config: officialConfig, provider: bin})
	}
	if only := os.Getenv("BENCH_PHASES"); only != "" {
		phases = slices.DeleteFunc(slices.Clone(phases), func(p string) bool { return !slices.Contains(strings.Split(only, ","), p) })
	}
	if only := os.Getenv("BENCH_SUBJECTS"); only != "" {
		subjects = slices.DeleteFunc(subjects, func(s subject) bool { return !slices.Contains(strings.Split(only, ","), s.name) })
	}
	type key struct {
		size           int
		subject, phase string
	}
	times, cpu := map[key][]time.Duration{}, map[key][]time.Duration{}
	requests := map[key][]int64{}
	writes := map[key][]int64{}
	peakRSS := map[key]int64{}
	var loads [][]string
	for i, size := range sizes {
		runs := runsPerSize[min(i, len(runsPerSize)-1)]
		profiles := max(size/10, 1)
		// Subjects take turns phase by phase, so that the machine's drift over
		// a long run falls on all of them alike.
		tofus := make([]*testenv.Tofu, len(subjects))
		for j, s := range subjects {
			work := filepath.Join(dir, fmt.Sprintf("%s-%d", strings.ReplaceAll(s.name, " ", "-"), size))
			if err := os.MkdirAll(work, 0o755); err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(work, "main.tf"), []byte(s.config(size, profiles)), 0o600); err != nil {
				b.Fatal(err)
			}
			tofus[j] = &testenv.Tofu{Bin: tofuBin, Dir: work, CLIConfig: rc, Env: env}
		}
		load := []string{loadAverage()}
		for run := 0; run < runs; run++ {
			for _, phase := range cycle(plansPerRun) {
				for j, s := range subjects {
					counter.reset()
					rss := sampleRSS(s.provider)
					cmd := tofus[j].Command(ctx, phaseArgs[phase]...)
					var combined bytes.Buffer
					cmd.Stdout, cmd.Stderr = &combined, &combined
					start := time.Now()
					err := cmd.Run()
					elapsed := time.Since(start)
					out := combined.Bytes()
					k := key{size, s.name, phase}
					peakRSS[k] = max(peakRSS[k], rss())
					if err != nil {
						b.Fatalf("%s %s at %d locks: %v\n%s", s.name, phase, size, err, tail(out, 30))
					}
					times[k] = append(times[k], elapsed)
					// Linux counts the children tofu waited for (the provider) in its usage.
					cpu[k] = append(cpu[k], cmd.ProcessState.UserTime()+cmd.ProcessState.SystemTime())
					requests[k] = append(requests[k], counter.total.Load())
					writes[k] = append(writes[k], counter.writes.Load())
				}
			}
		}
		load = append(load, loadAverage())
		loads = append(loads, load)
		resources := size + profiles
		printRows(size, size == sizes[0], func(phase string) string {
			td := median(times[key{size, "terraform_data", phase}])
			noop := median(times[key{size, "noop framework", phase}])
			cl := median(times[key{size, "consullock", phase}])
			k := key{size, "consullock", phase}
			return fmt.Sprintf("%s\t%.2fs\t%.2fs\t%.2fs\t%.2fx\t%.2fx\t%.3f (%d)\t%.3f (%d)\t%.0f MiB\t%.0f MiB", phase,
				td.Seconds(), noop.Seconds(), cl.Seconds(), cl.Seconds()/noop.Seconds(), cl.Seconds()/td.Seconds(),
				float64(medianInt(requests[k]))/float64(resources), medianInt(requests[k]),
				float64(medianInt(writes[k]))/float64(resources), medianInt(writes[k]),
				float64(peakRSS[key{size, "noop framework", phase}])/1024, float64(peakRSS[k])/1024)
		})
	}

	has := func(name string) bool {
		return slices.ContainsFunc(subjects, func(s subject) bool { return s.name == name })
	}
	if has("baseline") {
		for i, size := range sizes {
			printBaselineRows(size, i == 0, func(phase string) ([5]time.Duration, [2]int64) {
				k := func(name string) key { return key{size, name, phase} }
				return [5]time.Duration{median(times[k("baseline")]), median(times[k("consullock")]),
					median(cpu[k("noop framework")]), median(cpu[k("baseline")]), median(cpu[k("consullock")])}, [2]int64{peakRSS[k("baseline")], peakRSS[k("consullock")]}
			})
		}
	}
	if has("official") {
		for i, size := range sizes {
			printOfficialRows(size, i == 0, func(phase string) [6]time.Duration {
				k := func(name string) key { return key{size, name, phase} }
				return [6]time.Duration{median(times[k("official")]), median(times[k("noop framework")]), median(times[k("consullock")]),
					median(cpu[k("official")]), median(cpu[k("noop framework")]), median(cpu[k("consullock")])}
			})
		}
	}
	for i, size := range sizes {
		b.Logf("%d locks: load average %s at the start, %s at the end", size, loads[i][0], loads[i][1])
	}
	b.Logf("medians of %v runs per size, %d plans per run; OpenTofu %s launching each provider binary; Consul %s", runsPerSize, plansPerRun, tofuBin, agent.Bin)
}

// cycle is the phases of one run, with the plan repeated plans times.
func cycle(plans int) []string {
	var out []string
	for _, phase := range phases {
		n := 1
		if phase == "plan" {
			n = max(plans, 1)
		}
		for range n {
			out = append(out, phase)
		}
	}
	return out
}

// printRows prints the table rows of one size as soon as it is measured, so
// that a long run that is cut short still reports what it measured.
func printRows(size int, header bool, row func(phase string) string) {
	var table bytes.Buffer
	w := tabwriter.NewWriter(&table, 0, 0, 2, ' ', tabwriter.AlignRight)
	if header {
		fmt.Fprintf(w, "locks\tphase\tterraform_data\tnoop framework\tconsullock\tvs noop\tvs terraform_data\tConsul requests/resource (count)\twrite requests/resource (count)\tpeak RSS noop\tpeak RSS consullock\t\n")
	}
	for _, phase := range phases {
		fmt.Fprintf(w, "%d\t%s\t\n", size, row(phase))
	}
	_ = w.Flush()
	fmt.Print(table.String())
}

// baselineType is the provider type the baseline binary is installed as:
// its resources keep the local name consullock (consullock_lock), its own
// source address lets it sit beside the provider under test.
const baselineType = "consullockbase"

// printBaselineRows prints the comparison with BENCH_BASELINE of one size:
// the medians of wall time (baseline, consullock), then of CPU time of tofu
// and the provider processes it ran (noop, baseline, consullock), which the
// other processes sharing the machine disturb less than wall time; then
// the providers' peak RSS (baseline, consullock).
func printBaselineRows(size int, header bool, medians func(phase string) ([5]time.Duration, [2]int64)) {
	var table bytes.Buffer
	w := tabwriter.NewWriter(&table, 0, 0, 2, ' ', tabwriter.AlignRight)
	if header {
		fmt.Fprintf(w, "locks\tphase\tbaseline\tconsullock\tvs baseline\tCPU noop\tCPU baseline\tCPU consullock\tCPU vs baseline\tCPU vs noop\tpeak RSS baseline\tpeak RSS consullock\t\n")
	}
	for _, phase := range phases {
		m, rss := medians(phase)
		fmt.Fprintf(w, "%d\t%s\t%.2fs\t%.2fs\t%.2fx\t%.2fs\t%.2fs\t%.2fs\t%.2fx\t%.2fx\t%.0f MiB\t%.0f MiB\t\n", size, phase, m[0].Seconds(), m[1].Seconds(),
			m[1].Seconds()/m[0].Seconds(), m[2].Seconds(), m[3].Seconds(), m[4].Seconds(), m[4].Seconds()/m[3].Seconds(), m[4].Seconds()/m[2].Seconds(),
			float64(rss[0])/1024, float64(rss[1])/1024)
	}
	_ = w.Flush()
	fmt.Print(table.String())
}

// printOfficialRows prints the comparison with BENCH_OFFICIAL of one size:
// the medians of wall time, then of CPU time of tofu and the provider it
// ran (official, noop, consullock), and consullock's and the floor's ratios
// to the official provider.
func printOfficialRows(size int, header bool, medians func(phase string) [6]time.Duration) {
	var table bytes.Buffer
	w := tabwriter.NewWriter(&table, 0, 0, 2, ' ', tabwriter.AlignRight)
	if header {
		fmt.Fprintf(w, "locks\tphase\tofficial\tnoop\tconsullock\tconsullock vs official\tnoop vs official\tconsullock vs noop\tCPU official\tCPU noop\tCPU consullock\tCPU consullock vs official\tCPU noop vs official\tCPU consullock vs noop\t\n")
	}
	for _, phase := range phases {
		m := medians(phase)
		fmt.Fprintf(w, "%d\t%s\t%.2fs\t%.2fs\t%.2fs\t%.2fx\t%.2fx\t%.2fx\t%.2fs\t%.2fs\t%.2fs\t%.2fx\t%.2fx\t%.2fx\t\n", size, phase,
			m[0].Seconds(), m[1].Seconds(), m[2].Seconds(), m[2].Seconds()/m[0].Seconds(), m[1].Seconds()/m[0].Seconds(), m[2].Seconds()/m[1].Seconds(),
			m[3].Seconds(), m[4].Seconds(), m[5].Seconds(), m[5].Seconds()/m[3].Seconds(), m[4].Seconds()/m[3].Seconds(), m[5].Seconds()/m[4].Seconds())
	}
	_ = w.Flush()
	fmt.Print(table.String())
}

// loadAverage is the machine's 1, 5 and 15-minute load averages.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

// copyExecutable copies the executable from (named by the variable env) to
// the path to.
func copyExecutable(env, from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return fmt.Errorf("%s: %w", env, err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o755)
}

// shapedConfig is the configuration of provider's locks and profiles,
// named stem-N with prefixes stem/N.
func shapedConfig(provider, source, stem string) func(locks, profiles int) string {
	return func(locks, profiles int) string {
		return fmt.Sprintf(`terraform {
  required_providers {
    %[1]s = { source = %[4]q }
  }
}

variable "desc" {
  type = string
}

resource "%[1]s_session_defaults" "p" {
  count = %[3]d
  name  = "%[5]s-${count.index}"
}

resource "%[1]s_lock" "l" {
  count            = %[2]d
  name             = "%[5]s-${count.index}"
  prefix           = "%[5]s/${count.index}"
  session_defaults = %[1]s_session_defaults.p[count.index %% %[3]d].name
  description      = var.desc
}
`, provider, locks, profiles, source, stem)
	}
}

// officialConfig is the official provider's equivalent of shapedConfig:
// one consul_keys resource per profile and per lock, each writing one key,
// the lock's value naming its profile's key.
func officialConfig(locks, profiles int) string {
	return fmt.Sprintf(`terraform {
  required_providers {
    consul = { source = "hashicorp/consul" }
  }
}

variable "desc" {
  type = string
}

resource "consul_keys" "p" {
  count = %[2]d
  key {
    path   = "official/profiles/official-${count.index}"
    value  = jsonencode({ name = "official-${count.index}", ttl = "15s", lock_delay = "15s" })
    delete = true
  }
}

resource "consul_keys" "l" {
  count = %[1]d
  key {
    path = "official/locks/official-${count.index}"
    value = jsonencode({
      prefix           = "official/${count.index}"
      session_defaults = one(consul_keys.p[count.index %% %[2]d].key).path
      description      = var.desc
    })
    delete = true
  }
}
`, locks, profiles)
}

func terraformDataConfig(locks, profiles int) string {
	return fmt.Sprintf(`variable "desc" {
  type = string
}

resource "terraform_data" "p" {
  count = %[2]d
  input = { name = "bench-${count.index}", ttl = "15s", lock_delay = "15s" }
}

resource "terraform_data" "l" {
  count = %[1]d
  input = {
    name             = "bench-${count.index}"
    prefix           = "bench/${count.index}"
    session_defaults = terraform_data.p[count.index %% %[2]d].output.name
    description      = var.desc
  }
}
`, locks, profiles)
}

// countingProxy counts the requests the provider sends to Consul.
type countingProxy struct {
	url           string
	total, writes atomic.Int64
}

func newCountingProxy(tb testing.TB, target string) *countingProxy {
	u, err := url.Parse(target)
	if err != nil {
		tb.Fatal(err)
	}
	p := &countingProxy{}
	rp := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.total.Add(1)
		if isWrite(r) {
			p.writes.Add(1)
		}
		rp.ServeHTTP(w, r)
	}))
	tb.Cleanup(srv.Close)
	p.url = srv.URL
	return p
}

// readVerbs are the KV transaction verbs that write nothing.
var readVerbs = map[string]bool{"get": true, "get-or-empty": true, "get-tree": true, "check-index": true, "check-session": true, "check-not-exists": true}

// isWrite tells whether r may change Consul: any method but GET, except a
// transaction whose operations all only read. It restores r's body.
func isWrite(r *http.Request) bool {
	if r.Method == http.MethodGet {
		return false
	}
	if r.URL.Path != "/v1/txn" {
		return true
	}
	body, err := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return true
	}
	var ops []struct {
		KV *struct{ Verb string }
	}
	if json.Unmarshal(body, &ops) != nil {
		return true
	}
	for _, op := range ops {
		if op.KV == nil || !readVerbs[op.KV.Verb] {
			return true
		}
	}
	return false
}

func (p *countingProxy) reset() { p.total.Store(0); p.writes.Store(0) }

// sampleRSS polls the peak RSS (VmHWM) of every running process whose
// executable is bin until the returned function is called, and returns the
// highest value seen, in KiB.
func sampleRSS(bin string) func() int64 {
	if bin == "" {
		return func() int64 { return 0 }
	}
	var (
		peak atomic.Int64
		wg   sync.WaitGroup
	)
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			if kb := peakOf(bin); kb > peak.Load() {
				peak.Store(kb)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	return func() int64 { close(stop); wg.Wait(); return peak.Load() }
}

func peakOf(bin string) int64 {
	procs, _ := filepath.Glob("/proc/[0-9]*/exe")
	var peak int64
	for _, exe := range procs {
		if target, err := os.Readlink(exe); err != nil || target != bin {
			continue
		}
		status, err := os.ReadFile(filepath.Join(filepath.Dir(exe), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(status), "\n") {
			if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
				peak = max(peak, kb)
			}
		}
	}
	return peak
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func medianInt(ns []int64) int64 {
	if len(ns) == 0 {
		return 0
	}
	s := slices.Clone(ns)
	slices.Sort(s)
	return s[len(s)/2]
}

func tail(out []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
