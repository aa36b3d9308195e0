package runner

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/holdersvc"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

// TestHolderService_nilIsANoOp: a lock without holder_service has no
// holder service, and every hook on it does nothing (no request).
func TestHolderService_nilIsANoOp(t *testing.T) {
	r := &runner{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	hs := newHolderService(r)
	if hs != nil {
		t.Fatalf("newHolderService without holder_service = %+v, want nil", hs)
	}
	hs.onRenewed(time.Now())
	hs.withdraw()
	hs.wait()
	hs.start(nil)
}

// TestHolderService_onRenewedKeepsTheLatestAndNeverBlocks: the judge hands
// over renewals without waiting; an unread older one is replaced.
func TestHolderService_onRenewedKeepsTheLatestAndNeverBlocks(t *testing.T) {
	r := &runner{log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		lock: lockmodel.Lock{HolderService: &holdersvc.Service{Name: "web"}}}
	hs := newHolderService(r)
	t0 := time.Unix(100, 0)
	for i := range 5 {
		hs.onRenewed(t0.Add(time.Duration(i) * time.Second))
	}
	if got := <-hs.renewed; !got.Equal(t0.Add(4 * time.Second)) {
		t.Fatalf("renewal handed over = %s, want the latest", got)
	}
	select {
	case extra := <-hs.renewed:
		t.Fatalf("a second renewal was queued: %s", extra)
	default:
	}
	hs.wait() // never started: returns at once
}
