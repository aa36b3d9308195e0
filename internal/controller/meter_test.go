package controller

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// meteredNode is the node name of the metered agent: the shipped observe
// rules (examples/controller/observe.hcl) let the controller create its
// leader session on nodes named "controller-...".
const meteredNode = "controller-1"

var (
	meteredOnce  sync.Once
	meteredAgent *testenv.Agent
	meteredErr   error
)

// metered returns a second agent, started on first use and shared by the
// tests that count Consul writes: it keeps Prometheus counters (telemetry
// retention), so that the writes it applied can be read back exactly.
func metered(t testing.TB) *testenv.Agent {
	t.Helper()
	meteredOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		meteredAgent, meteredErr = testenv.Start(ctx, testenv.Options{NodeName: meteredNode, ExtraConfig: `
telemetry {
  prometheus_retention_time = "24h"
  disable_hostname          = true
}
`})
	})
	if meteredErr != nil {
		t.Fatal(meteredErr)
	}
	return meteredAgent
}

func stopMetered() {
	if meteredAgent != nil {
		meteredAgent.Stop()
	}
}

// agentCounters are cumulative counters the agent keeps for the writes it
// applies (raft), read from /v1/agent/metrics?format=prometheus.
type agentCounters map[string]float64

// The counters that make up "Consul writes" for the controller: KV writes
// (set, cas, lock, unlock, delete), transactions, ACL policy upserts and
// session create/destroy. A session renewal is no raft write: it shows
// only in the HTTP counter consul_api_http_count{path="v1_session_renew_"}.
var writeCounters = []string{
	"consul_kvs_apply_count",
	"consul_txn_apply_count",
	"consul_acl_policy_upsert_count",
	"consul_acl_policy_delete_count",
	"consul_session_apply_count",
}

func readAgentCounters(t testing.TB, a *testenv.Agent) agentCounters {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, a.HTTPAddr()+"/v1/agent/metrics?format=prometheus", nil)
	req.Header.Set("X-Consul-Token", a.ManagementToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("agent metrics: HTTP %d %s", resp.StatusCode, body)
	}
	out := agentCounters{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out
}

// writesSince returns the write counters that grew since before, and the
// total growth.
func (after agentCounters) writesSince(before agentCounters) (map[string]float64, float64) {
	d := map[string]float64{}
	var total float64
	for _, name := range writeCounters {
		if n := after[name] - before[name]; n != 0 {
			d[name] = n
			total += n
		}
	}
	return d, total
}

// countingProxy sits between a client and the agent and counts the
// requests that are not reads, by method and path. It can also cut every
// request in flight (to make blocking queries fail on purpose).
type countingProxy struct {
	srv *httptest.Server

	mu       sync.Mutex
	writes   map[string]int
	seq      []string // the writes in the order they arrived
	reads    int
	kvReads  []kvRead // answered KV reads, in the order they were answered
	inflight map[*http.Request]context.CancelFunc
}

// kvRead is one answered GET /v1/kv/...: the key or prefix, the ?index it
// blocked on, the X-Consul-Index of the answer and what the answer carried.
type kvRead struct {
	Key           string
	Index, Answer uint64
	Body          []byte
}

// Changed reports whether the answer carried a change (a blocking query
// that timed out answers with the index it was given).
func (r kvRead) Changed() bool { return r.Answer != r.Index }

// teeWriter keeps a copy of a response body.
type teeWriter struct {
	http.ResponseWriter
	body bytes.Buffer
}

func (w *teeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *teeWriter) Write(p []byte) (int, error) {
	w.body.Write(p)
	return w.ResponseWriter.Write(p)
}

func newCountingProxy(t testing.TB, a *testenv.Agent) *countingProxy {
	t.Helper()
	target, _ := url.Parse(a.HTTPAddr())
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ErrorLog = log.New(io.Discard, "", 0)
	p := &countingProxy{writes: map[string]int{}, inflight: map[*http.Request]context.CancelFunc{}}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithCancel(r.Context())
		r = r.WithContext(ctx)
		p.mu.Lock()
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			p.reads++
		} else {
			for _, w := range writesOf(r) {
				p.writes[w]++
				p.seq = append(p.seq, w)
			}
		}
		p.inflight[r] = cancel
		p.mu.Unlock()
		defer func() {
			p.mu.Lock()
			delete(p.inflight, r)
			p.mu.Unlock()
			cancel()
		}()
		if r.Method != http.MethodGet || !strings.HasPrefix(r.URL.Path, "/v1/kv/") {
			rp.ServeHTTP(w, r)
			return
		}
		tee := &teeWriter{ResponseWriter: w}
		rp.ServeHTTP(tee, r)
		index, _ := strconv.ParseUint(r.URL.Query().Get("index"), 10, 64)
		answer, _ := strconv.ParseUint(tee.Header().Get("X-Consul-Index"), 10, 64)
		p.mu.Lock()
		body := tee.body.Bytes()
		if tee.Header().Get("Content-Encoding") == "gzip" {
			if zr, err := gzip.NewReader(bytes.NewReader(body)); err == nil {
				body, _ = io.ReadAll(zr)
			}
		}
		p.kvReads = append(p.kvReads, kvRead{Key: strings.TrimPrefix(r.URL.Path, "/v1/kv/"), Index: index, Answer: answer, Body: body})
		p.mu.Unlock()
	}))
	t.Cleanup(p.srv.Close)
	return p
}

// writesOf names a write request the way the tests compare them, "METHOD
// /path". A transaction that writes KV keys is named as the KV writes it
// makes ("PUT /v1/kv/<key>", "DELETE /v1/kv/<key>"), so that a record
// written by check-and-set in a transaction counts like one written with
// ?cas=; a read-only transaction stays "PUT /v1/txn".
func writesOf(r *http.Request) []string {
	whole := []string{r.Method + " " + r.URL.Path}
	if r.URL.Path != "/v1/txn" || r.Body == nil {
		return whole
	}
	body, err := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return whole
	}
	var ops []struct {
		KV *struct{ Verb, Key string }
	}
	if json.Unmarshal(body, &ops) != nil {
		return whole
	}
	var out []string
	for _, op := range ops {
		if op.KV == nil {
			continue
		}
		switch op.KV.Verb {
		case "set", "cas", "lock", "unlock":
			out = append(out, "PUT /v1/kv/"+op.KV.Key)
		case "delete", "delete-cas", "delete-tree":
			out = append(out, "DELETE /v1/kv/"+op.KV.Key)
		}
	}
	if len(out) == 0 {
		return whole
	}
	return out
}

// Addr is host:port of the proxy.
func (p *countingProxy) Addr() string { return strings.TrimPrefix(p.srv.URL, "http://") }

// Writes returns a copy of the write counts by "METHOD /path".
func (p *countingProxy) Writes() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]int, len(p.writes))
	for k, v := range p.writes {
		out[k] = v
	}
	return out
}

// Sequence returns the writes in the order they arrived.
func (p *countingProxy) Sequence() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.seq...)
}

// Reset forgets the counts so far.
func (p *countingProxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.writes, p.seq, p.reads, p.kvReads = map[string]int{}, nil, 0, nil
}

// KVReads returns the KV reads answered since the last Reset.
func (p *countingProxy) KVReads() []kvRead {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]kvRead(nil), p.kvReads...)
}

// CutInflight fails every request in flight (the client sees 502) and
// returns their paths.
func (p *countingProxy) CutInflight() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var paths []string
	for r, cancel := range p.inflight {
		cancel()
		paths = append(paths, r.URL.Path)
	}
	return paths
}

// writesMatching sums the write counts whose "METHOD /path" satisfies keep.
func writesMatching(w map[string]int, keep func(string) bool) int {
	n := 0
	for k, v := range w {
		if keep(k) {
			n += v
		}
	}
	return n
}

func formatCounts[V int | float64](m map[string]V) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%v ", k, m[k])
	}
	if b.Len() == 0 {
		return "none"
	}
	return strings.TrimSpace(b.String())
}
