package lockmodel

import (
	"strings"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/validation"
)

func TestRunOnce_defaults(t *testing.T) {
	got := ledger.RunOnce{Period: time.Hour}.WithDefaults()
	if got.MaxAttempts != 3 || got.Keep != 20 {
		t.Fatalf("WithDefaults() = %+v, want max_attempts 3 and keep 20", got)
	}
	n, err := Lock{Name: "job", Prefix: "svc/job", RunOnce: &ledger.RunOnce{Period: time.Hour}}.Normalize()
	if err != nil || n.RunOnce.MaxAttempts != 3 || n.RunOnce.Keep != 20 {
		t.Fatalf("Normalize() = %+v, %v; want run_once with defaults", n.RunOnce, err)
	}
}

func TestLock_runOnceNeedsAMutex(t *testing.T) {
	err := Lock{Name: "pool", Prefix: "svc/pool", Limit: 3, RunOnce: &ledger.RunOnce{Period: time.Hour}}.Validate()
	errs := validation.AsFieldErrors(err)
	if len(errs) != 1 || errs[0].Field != "run_once" || !strings.Contains(errs[0].Error(), "limit 3") {
		t.Fatalf("Validate() = %v, want one run_once error naming the limit", err)
	}
	if err := (Lock{Name: "job", Prefix: "svc/job", RunOnce: &ledger.RunOnce{Period: time.Hour}}).Validate(); err != nil {
		t.Fatalf("a mutex with run_once: %v", err)
	}
	errs = validation.AsFieldErrors(Lock{Name: "job", Prefix: "svc/job", RunOnce: &ledger.RunOnce{Period: time.Second}}.Validate())
	if len(errs) != 1 || errs[0].Field != "run_once.period" {
		t.Fatalf("Lock.Validate does not judge run_once: %v", errs)
	}
}

func TestRunOnce_PeriodWarnings(t *testing.T) {
	fast := SessionProfile{Name: "fast"} // worst_case_gap 2 x 15s + 15s = 45s
	slow := SessionProfile{Name: "slow", TTL: time.Hour, LockDelay: time.Minute}
	if ws := RunOncePeriodWarnings(ledger.RunOnce{Period: time.Minute}, fast.Resolve()); len(ws) != 0 {
		t.Errorf("1m period with a 45s gap: %v, want no warning", ws)
	}
	ws := RunOncePeriodWarnings(ledger.RunOnce{Period: time.Hour}, slow.Resolve())
	if len(ws) != 1 || ws[0].Field != "run_once.period" || !strings.Contains(ws[0].Detail, "2h1m0s") {
		t.Errorf("1h period with a 2h1m gap: %v, want one warning naming the gap", ws)
	}
}
