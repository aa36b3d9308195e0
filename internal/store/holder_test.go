package store

import (
	"slices"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

func TestSemaphoreStateRecognisesHolderTables(t *testing.T) {
	table := []byte(`{"Limit":3,"Holders":{"s1":true}}`)
	for _, tc := range []struct {
		name      string
		key       string
		pair      api.KVPair
		want      bool
		wantLimit int
		wantErr   bool
	}{
		{"api.Semaphore table", "jobs/a/.lock", api.KVPair{Flags: lockmodel.SemaphoreFlagValue, Value: table}, true, 3, false},
		{"fresh table with empty value", "jobs/a/.lock", api.KVPair{Flags: lockmodel.SemaphoreFlagValue}, true, 0, false},
		{"table without flags", "jobs/a/.lock", api.KVPair{Value: table}, true, 3, false},
		{"api.Lock mutex", "jobs/a/.lock", api.KVPair{Flags: lockmodel.LockFlagValue, Value: table}, false, 0, false},
		{"held key is never a table", "jobs/a/.lock", api.KVPair{Flags: lockmodel.SemaphoreFlagValue, Session: "s1", Value: table}, false, 0, false},
		{"contender key", "jobs/a/s1", api.KVPair{Flags: lockmodel.SemaphoreFlagValue, Value: []byte("worker")}, false, 0, false},
		{"plain value without flags", "jobs/a/.lock", api.KVPair{Value: []byte("hello")}, false, 0, false},
		{"JSON without a limit", "jobs/a/.lock", api.KVPair{Value: []byte(`{"Holders":{}}`)}, false, 0, false},
		{"semaphore flags, broken value", "jobs/a/.lock", api.KVPair{Flags: lockmodel.SemaphoreFlagValue, Value: []byte("{")}, false, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state, ok, err := semaphoreState(tc.key, &tc.pair)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if ok != tc.want || state.Limit != tc.wantLimit {
				t.Fatalf("got table %v limit %d, want %v limit %d", ok, state.Limit, tc.want, tc.wantLimit)
			}
		})
	}
}

func TestSessionChecksMergesLegacyChecks(t *testing.T) {
	// A create request with "Checks": ["serfHealth", "job"] is stored with
	// the default NodeChecks ["serfHealth"] and the legacy field as sent.
	node, service := SessionChecks(&api.SessionEntry{
		NodeChecks:    []string{"serfHealth"},
		Checks:        []string{"serfHealth", "job"},
		ServiceChecks: []api.ServiceCheck{{ID: "service:web"}, {ID: "service:web", Namespace: "default"}},
	})
	if !slices.Equal(node, []string{"serfHealth", "job"}) {
		t.Errorf("node checks = %q", node)
	}
	if !slices.Equal(service, []string{"service:web"}) {
		t.Errorf("service checks = %q", service)
	}
	node, service = SessionChecks(&api.SessionEntry{})
	if node == nil || service == nil || len(node)+len(service) != 0 {
		t.Errorf("a session without checks: got %q, %q; want empty, non-nil lists", node, service)
	}
}
