package runner

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/record"
)

// BenchmarkRunOnceWaiterExit measures how fast waiters leave once a run
// succeeded: per iteration a holder runs a run ID's command while four
// runners wait. The release and the success are one transaction, so a
// waiter either sees the success in its watch of the ledger, or acquires
// the released lock first and reads it then; both are counted; the figures are from the moment this benchmark's own
// blocking query sees the success in the ledger (the release transaction
// committed) to each waiter's exit, p50, p99 and max over all waiters.
// It also measures the one window where a command can run twice: from
// the end of the holder's command (as the command records it) to the
// commit of the transaction that records its success and releases. No
// timed assertion: the figures are printed.
//
//	CONSUL_BIN=$PWD/bin/consul go test -run '^$' -bench RunOnceWaiterExit -benchtime 50x ./internal/runner/
func BenchmarkRunOnceWaiterExit(b *testing.B) {
	const waiters = 4
	l, token := declareRunOnce(b, ledger.RunOnce{Period: time.Hour})
	record := filepath.Join(b.TempDir(), "record")
	var lat, window []time.Duration
	i, whileWaiting := 0, 0
	for b.Loop() {
		i++
		id := fmt.Sprintf("bench-%d", i)
		args := []string{"-lock", l.Name, "-run-id", id}
		holder := startRun(b, "holder "+id, token, args, childArgs(record, id+".h", "-wait-stdin")...)
		waitStarted(b, record, id+".h")
		var ws []*proc
		for j := range waiters {
			ws = append(ws, startRun(b, fmt.Sprintf("waiter %s.%d", id, j), token, args, childArgs(record, fmt.Sprintf("%s.%d", id, j))...))
		}
		for _, w := range ws {
			waitOutput(b, w, "holder_session=")
		}
		seen := make(chan time.Time, 1)
		go func() { seen <- waitSucceeded(b, l, id) }()
		holder.closeStdin()
		at := <-seen
		for _, w := range ws {
			if code := w.wait(time.Minute); code != 0 || !strings.Contains(w.out.String(), "run already succeeded") {
				b.Fatalf("%s exited %d without seeing the success:\n%s", w.name, code, w.out.String())
			}
			if strings.Contains(w.out.String(), `seen="while waiting for the lock"`) {
				whileWaiting++
			}
			lat = append(lat, w.exited.Sub(at))
		}
		holder.wait(time.Minute)
		for _, r := range readRuns(b, record) {
			if r.tag == id+".h" {
				window = append(window, at.Sub(r.end))
			}
		}
	}
	slices.Sort(lat)
	slices.Sort(window)
	pct := func(p float64) time.Duration { return quantile(lat, p) }
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(pct(0.5))/float64(time.Millisecond), "p50_ms")
	b.ReportMetric(float64(pct(0.99))/float64(time.Millisecond), "p99_ms")
	b.ReportMetric(float64(lat[len(lat)-1])/float64(time.Millisecond), "max_ms")
	b.Logf("MEASURED success recorded -> waiter exited over %d waiters: p50 %s, p99 %s, max %s; %d saw it in the ledger while "+
		"waiting, %d acquired the released lock first and read it then",
		len(lat), pct(0.5).Round(time.Microsecond), pct(0.99).Round(time.Microsecond), lat[len(lat)-1].Round(time.Microsecond),
		whileWaiting, len(lat)-whileWaiting)
	b.ReportMetric(float64(quantile(window, 0.99))/float64(time.Millisecond), "twice_window_p99_ms")
	b.Logf("MEASURED the window where a command can run twice (its end -> the release transaction that records its success "+
		"committed) over %d runs: p50 %s, p99 %s, max %s", len(window), quantile(window, 0.5).Round(time.Microsecond),
		quantile(window, 0.99).Round(time.Microsecond), window[len(window)-1].Round(time.Microsecond))
}

// waitSucceeded returns when a blocking query first shows run id
// succeeded in l's ledger.
func waitSucceeded(b testing.TB, l lockmodel.Lock, id string) time.Time {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var index uint64
	for {
		pair, meta, err := agent.Client().KV().Get(ledgerKey(l), (&api.QueryOptions{WaitIndex: index}).WithContext(ctx))
		now := time.Now()
		if err != nil {
			b.Error(err)
			return now
		}
		if pair != nil {
			if led, err := record.DecodeLedger(pair.Value); err == nil {
				if i := led.Find(id); i >= 0 && led.Runs[i].Outcome == ledger.RunSucceeded {
					return now
				}
			}
		}
		index = consul.NextIndex(index, meta.LastIndex)
	}
}
