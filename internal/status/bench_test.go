package status

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"

	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// BenchmarkStatus measures one `status -json` at 10 and 10,000 declared
// locks (every 10th held) against the real agent: Consul requests per run
// (fixed) and wall time.
//
//	CONSUL_BIN=$PWD/bin/consul go test -run '^$' -bench BenchmarkStatus -benchtime 5x ./internal/status/
func BenchmarkStatus(b *testing.B) {
	for _, n := range []int{10, 10000} {
		b.Run(fmt.Sprintf("locks=%d", n), func(b *testing.B) {
			c := agent.Client()
			p := testenv.UniquePrefix(b.Name())
			registry, prefix := p+"/registry", p+"/locks"
			b.Cleanup(func() { _, _ = c.KV().DeleteTree(p+"/", nil) })
			sess, _, err := c.Session().Create(&api.SessionEntry{TTL: "60s", LockDelay: 15 * time.Second}, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _, _ = c.Session().Destroy(sess, nil) })
			prof, _ := record.EncodeSessionProfileRecord(strict)
			ops := api.KVTxnOps{{Verb: api.KVSet, Key: lockmodel.RegistryKey(registry, lockmodel.KindSessionDefaults, "strict"), Value: prof}}
			flush := func(force bool) {
				if len(ops) == 0 || (!force && len(ops) < 64) {
					return
				}
				if ok, resp, _, err := c.KV().Txn(ops, nil); err != nil || !ok {
					b.Fatalf("txn: ok=%v err=%v %+v", ok, err, resp)
				}
				ops = ops[:0]
			}
			for i := range n {
				l := lockmodel.Lock{Name: fmt.Sprintf("lock-%05d", i), Prefix: fmt.Sprintf("%s/g%02d/lock-%05d", prefix, i%20, i), SessionDefaults: "strict"}
				rec, err := record.EncodeLockRecord(l)
				if err != nil {
					b.Fatal(err)
				}
				l, _ = l.Normalize()
				ops = append(ops, &api.KVTxnOp{Verb: api.KVSet, Key: lockmodel.RegistryKey(registry, lockmodel.KindLock, l.Name), Value: rec})
				flush(false)
				ops = append(ops, &api.KVTxnOp{Verb: api.KVSet, Key: l.Key, Flags: l.Flags()})
				if i%10 == 0 {
					ops = append(ops, &api.KVTxnOp{Verb: api.KVLock, Key: l.Key, Flags: l.Flags(), Session: sess, Value: holderValue(time.Now())})
				}
				flush(false)
			}
			flush(true)
			b.Setenv("CONSUL_HTTP_ADDR", agent.Addr)
			b.Setenv("CONSUL_HTTP_TOKEN", agent.ManagementToken)
			var out bytes.Buffer
			b.ResetTimer()
			start := time.Now()
			for b.Loop() {
				out.Reset()
				if code := Run(context.Background(), []string{"-registry-prefix", registry, "-json"}, &out, &out); code != ExitViolation && code != ExitOK {
					b.Fatalf("exit %d: %s", code, out.String())
				}
			}
			wall := time.Since(start) / time.Duration(b.N)
			rep := Report{}
			if err := jsonUnmarshal(out.Bytes(), &rep); err != nil || len(rep.Locks) != n {
				b.Fatalf("report: %v, %d locks", err, len(rep.Locks))
			}
			b.ReportMetric(float64(rep.ConsulRequests), "requests/op")
			b.Logf("%d locks (%d held): %d Consul requests, %s per status run", n, rep.Summary.Held, rep.ConsulRequests, wall.Round(time.Millisecond))
		})
	}
}
