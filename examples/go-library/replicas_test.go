package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/concurrency"
	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// Three replicas fire for one slot of the declared schedule at once: the
// job runs on one, the two others log that another replica ran it, and
// the fenced result names attempt 1.
func TestRunSlot_threeReplicasRunTheSlotOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	agent, err := testenv.Start(ctx, testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Stop()
	client := agent.Client()
	registry := "consul-lock"
	declareReport(t, client, registry)

	var (
		mu   sync.Mutex
		logs bytes.Buffer
		wg   sync.WaitGroup
	)
	log := slog.New(slog.NewTextHandler(&lockedWriter{mu: &mu, w: &logs}, nil))
	slot := "2026-12-07T02:05:00Z"
	for range 3 {
		job := concurrency.NewRunOnce(client, "nightly-report", concurrency.WithRegistryPrefix(registry))
		wg.Add(1)
		go func() {
			defer wg.Done()
			runSlot(ctx, log, job, client, "nightly-report", slot)
		}()
	}
	wg.Wait()
	out := logs.String()
	if n, m := strings.Count(out, "ran the slot here"), strings.Count(out, "another replica ran the slot"); n != 1 || m != 2 {
		t.Fatalf("ran here %d times, elsewhere %d times:\n%s", n, m, out)
	}
	pair, _, err := client.KV().Get("jobs/nightly-report/last-result", nil)
	if err != nil || pair == nil || !strings.HasPrefix(string(pair.Value), "run "+slot+", attempt 1,") {
		t.Fatalf("result %v, %v", pair, err)
	}
}

// declareReport writes the records main.tf declares.
func declareReport(t *testing.T, client *api.Client, registry string) {
	t.Helper()
	p := lockmodel.SessionProfile{Name: "nightly-report", TTL: 10 * time.Second, LockDelay: 15 * time.Second}
	l := lockmodel.Lock{Name: "nightly-report", Prefix: "jobs/nightly-report", Limit: 1, SessionDefaults: p.Name,
		RunOnce: &ledger.RunOnce{Schedule: "*/5 * * * *", StartingDeadline: 4 * time.Minute, MaxAttempts: 3}}
	pv, err := record.EncodeSessionProfileRecord(p)
	if err != nil {
		t.Fatal(err)
	}
	lv, err := record.EncodeLockRecord(l)
	if err != nil {
		t.Fatal(err)
	}
	for key, v := range map[string][]byte{
		lockmodel.RegistryKey(registry, lockmodel.KindSessionDefaults, p.Name): pv,
		lockmodel.RegistryKey(registry, lockmodel.KindLock, l.Name):            lv,
	} {
		if _, err := client.KV().Put(&api.KVPair{Key: key, Value: v}, nil); err != nil {
			t.Fatal(err)
		}
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}
