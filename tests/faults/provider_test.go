package faults

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"

	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// Two configurations declare the same lock name (with different prefixes)
// and are applied at the same moment with real OpenTofu: one must win, the
// other must fail with a conflict, and the winner's declaration must not
// be overwritten.
func TestFaults_providerConcurrentAppliesOnOneLockName(t *testing.T) {
	dir := t.TempDir()
	tf, err := testenv.NewTofuWorkspace(providerDir(t, dir), dir)
	if err != nil {
		t.Fatal(err)
	}
	tf.Env = cleanEnv()
	rounds := 2
	if os.Getenv("FAULTS_FULL") != "" {
		rounds = 5
	}
	// The two ways of losing: the record was written between read and
	// write (check-and-set), or it was already there when read.
	conflict := regexp.MustCompile(`Registry Record Changed Concurrently|already\s+recorded`)
	kv := agent.Client().KV()
	var concurrent, orphans int
	for round := range rounds {
		name := fmt.Sprintf("faults-provider-%d-%d", os.Getpid(), round)
		type result struct {
			side, prefix string
			out          bytes.Buffer
			err          error
		}
		results := []*result{{side: "a"}, {side: "b"}}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for _, r := range results {
			r.prefix = "faults/" + name + "-" + r.side
			cfg := filepath.Join(dir, name+"-"+r.side)
			if err := os.MkdirAll(cfg, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(cfg, "main.tf"), fmt.Appendf(nil, `terraform {
  required_providers {
    consullock = { source = "consullock/consullock" }
  }
}
provider "consullock" {
  address = %q
  token   = %q
}
resource "consullock_lock" "job" {
  name   = %q
  prefix = %q
}
`, agent.Addr, agent.ManagementToken, name, r.prefix), 0o600); err != nil {
				t.Fatal(err)
			}
			side := *tf
			side.Dir = cfg
			cmd := side.Command(context.Background(), "apply", "-auto-approve", "-input=false", "-no-color")
			cmd.Stdout, cmd.Stderr = &r.out, &r.out
			wg.Go(func() {
				<-start
				r.err = cmd.Run()
			})
		}
		close(start)
		wg.Wait()

		var winners, losers []*result
		for _, r := range results {
			if r.err == nil {
				winners = append(winners, r)
			} else {
				losers = append(losers, r)
			}
		}
		if len(winners) != 1 || len(losers) != 1 {
			t.Fatalf("round %d: %d applies succeeded, want exactly 1\n--- a:\n%s\n--- b:\n%s", round, len(winners), &results[0].out, &results[1].out)
		}
		win, lose := winners[0], losers[0]
		if !conflict.Match(lose.out.Bytes()) {
			t.Errorf("round %d: the losing apply does not report the conflict:\n%s", round, &lose.out)
		}
		pair, _, err := kv.Get(lockmodel.RegistryKey(lockmodel.DefaultRegistryPrefix, lockmodel.KindLock, name), &api.QueryOptions{RequireConsistent: true})
		if err != nil || pair == nil {
			t.Fatalf("round %d: reading the declaration: %v (present: %v)", round, err, pair != nil)
		}
		rec, err := record.DecodeLockRecord(pair.Value)
		if err != nil {
			t.Fatalf("round %d: declaration: %v", round, err)
		}
		if rec.Prefix != win.prefix {
			t.Errorf("round %d: the declaration has prefix %q; the winning apply (%s) wrote %q: it was overwritten", round, rec.Prefix, win.side, win.prefix)
		}
		if p, _, err := kv.Get(win.prefix+"/.lock", nil); err != nil || p == nil || p.Flags != lockmodel.LockFlagValue {
			t.Errorf("round %d: the winner's lock key %s/.lock is missing or has wrong flags (err %v)", round, win.prefix, err)
		}
		// The provider writes the record (check-and-set) before the key, so
		// the losing apply must leave nothing behind.
		orphan := "no"
		if p, _, err := kv.Get(lose.prefix+"/.lock", nil); err == nil && p != nil {
			orphan = "YES: " + lose.prefix + "/.lock is in Consul and in no state"
			orphans++
			t.Errorf("round %d: the losing apply (%s) left its lock key %s/.lock behind, in no state", round, lose.side, lose.prefix)
		}
		if bytes.Contains(lose.out.Bytes(), []byte("Changed Concurrently")) {
			concurrent++
		}
		t.Logf("round %d: apply %s won, apply %s failed with the conflict; declaration kept; orphan key: %s", round, win.side, lose.side, orphan)
	}
	t.Logf("concurrent applies: %d rounds, %d lost the check-and-set race (the rest found the record already there), "+
		"%d conflicts reported, 0 declarations overwritten, %d orphan lock keys", rounds, concurrent, rounds, orphans)
}
