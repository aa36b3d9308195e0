package record

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/holdersvc"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

// The declarations' records: what lockmodel validates is what a record
// holds, and a valid declaration reads back as itself.

func TestLockRecord_holderServiceRoundTrip(t *testing.T) {
	l := lockmodel.Lock{Name: "web", Prefix: "service/web", HolderService: &holdersvc.Service{Name: "web-leader", Tags: []string{"primary"}, Port: 80, Meta: map[string]string{"team": "a"}}}
	b, err := EncodeLockRecord(l)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"holder_service":{"name":"web-leader","tags":["primary"],"port":80,"meta":{"team":"a"}}`) {
		t.Fatalf("record = %s", b)
	}
	got, err := DecodeLockRecord(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.HolderService == nil || got.HolderService.Name != "web-leader" || got.HolderService.Port != 80 || got.HolderService.Meta["team"] != "a" {
		t.Fatalf("decoded holder_service = %+v", got.HolderService)
	}
	plain, _ := EncodeLockRecord(lockmodel.Lock{Name: "web", Prefix: "service/web"})
	if strings.Contains(string(plain), "holder_service") {
		t.Fatalf("a lock without holder_service writes it: %s", plain)
	}
	bad := strings.Replace(string(b), `"port":80`, `"port":70000`, 1)
	if _, err := DecodeLockRecord([]byte(bad)); err == nil || !strings.Contains(err.Error(), holdersvc.FieldPort) {
		t.Fatalf("a record with port 70000 decodes: %v", err)
	}
}

func TestLockRecord_waitersRoundTrip(t *testing.T) {
	for _, w := range []string{"", lockmodel.WaitersRace, lockmodel.WaitersQueue, lockmodel.WaitersHandOff} {
		l := lockmodel.Lock{Name: "job", Prefix: "svc/job", Waiters: w}
		b, err := EncodeLockRecord(l)
		if err != nil {
			t.Fatal(err)
		}
		queued := w == lockmodel.WaitersQueue || w == lockmodel.WaitersHandOff
		if strings.Contains(string(b), "waiters") != queued {
			t.Errorf("waiters %q: record %s; the field is written only for queue and handoff", w, b)
		}
		got, err := DecodeLockRecord(b)
		if err != nil {
			t.Fatal(err)
		}
		if got.Queued() != queued || got.HandsOff() != (w == lockmodel.WaitersHandOff) {
			t.Errorf("waiters %q read back as %q", w, got.Waiters)
		}
	}
}

func FuzzLockRecord(f *testing.F) {
	f.Add("nightly-report", "service/job", "", 1, "fast", int64(time.Hour), "desc")
	f.Add("pool", "/svc/pool/", "svc/pool/.lock", 3, "", int64(0), "")
	f.Add("x", "a//b", "../x", -1, "a b", int64(-1), "\xff")
	f.Fuzz(func(t *testing.T, name, prefix, key string, limit int, sessionDefaults string, maxHold int64, description string) {
		l := lockmodel.Lock{Name: name, Prefix: prefix, Key: key, Limit: limit, SessionDefaults: sessionDefaults,
			MaxHold: time.Duration(maxHold), Description: description}
		b, encErr := EncodeLockRecord(l)
		if err := l.Validate(); err != nil {
			if encErr == nil {
				t.Fatalf("EncodeLockRecord accepted a lock Validate refuses: %v", err)
			}
			return
		}
		if encErr != nil {
			t.Fatalf("EncodeLockRecord: %v", encErr)
		}
		n, _ := l.Normalize()
		got, err := DecodeLockRecord(b)
		if err != nil || got != n {
			t.Fatalf("record round trip: %s -> %+v, %v; want %+v", b, got, err, n)
		}
		if !strings.Contains(string(b), fmt.Sprintf(`"flags":"%s"`, lockmodel.FormatFlags(n.Flags()))) {
			t.Fatalf("record %s lacks the flags", b)
		}
	})
}

func FuzzSessionProfileRecord(f *testing.F) {
	f.Add("fast", int64(15*time.Second), int64(15*time.Second), "release", "serfHealth", false, "", "", int64(0))
	f.Add("x", int64(0), int64(-1), "delete", "", true, "web", "ns", int64(5*time.Second))
	f.Add("0", int64(15*time.Second), int64(15*time.Second), "", "0", false, "0", "\x87", int64(0))
	f.Add("bad name", int64(time.Hour), int64(time.Minute), "", "a b", false, "web", "", int64(-1))
	f.Fuzz(func(t *testing.T, name string, ttl, delay int64, behavior, nodeCheck string, noNodeChecks bool,
		svcID, svcNS string, renew int64) {
		p := lockmodel.SessionProfile{Name: name, TTL: time.Duration(ttl), LockDelay: time.Duration(delay),
			Behavior: lockmodel.Behavior(behavior), RenewEvery: time.Duration(renew)}
		switch {
		case noNodeChecks:
			p.NodeChecks = []string{}
		case nodeCheck != "":
			p.NodeChecks = []string{nodeCheck}
		}
		if svcID != "" || svcNS != "" {
			p.ServiceChecks = []lockmodel.ServiceCheck{{ID: svcID, Namespace: svcNS}}
		}
		b, encErr := EncodeSessionProfileRecord(p)
		if err := p.Validate(); err != nil {
			if encErr == nil {
				t.Fatalf("EncodeSessionProfileRecord accepted a profile Validate refuses: %v", err)
			}
			return
		}
		if encErr != nil {
			t.Fatalf("EncodeSessionProfileRecord: %v", encErr)
		}
		got, err := DecodeSessionProfileRecord(b)
		if err != nil {
			t.Fatalf("DecodeSessionProfileRecord(%s): %v", b, err)
		}
		if d := p.Resolve(); !reflect.DeepEqual(got, d) {
			t.Fatalf("record round trip changed the profile:\n got %+v\nwant %+v", got, d)
		}
	})
}
