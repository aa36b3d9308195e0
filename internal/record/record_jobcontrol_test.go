package record

import (
	"strings"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

func TestLockRecord_jobControlRoundTrips(t *testing.T) {
	l := lockmodel.Lock{Name: "nightly", Prefix: "jobs/nightly", RunOnce: &ledger.RunOnce{Period: time.Hour, MaxRuntime: 10 * time.Minute,
		RetryAfter: 30 * time.Second, RetryBackoff: 1.5}}
	n, err := l.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	b, err := EncodeLockRecord(n)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeLockRecord(b)
	if err != nil {
		t.Fatal(err)
	}
	if *back.RunOnce != *n.RunOnce {
		t.Fatalf("round trip: %+v, want %+v", *back.RunOnce, *n.RunOnce)
	}
	bad := strings.Replace(string(b), `"max_runtime":"10m0s"`, `"max_runtime":"-1s"`, 1)
	if _, err := DecodeLockRecord([]byte(bad)); err == nil || !strings.Contains(err.Error(), ledger.FieldRunOnceMaxRuntime) {
		t.Fatalf("negative max_runtime in a record: %v", err)
	}
}
