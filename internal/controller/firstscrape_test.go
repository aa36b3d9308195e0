package controller

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/compliance"
	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

// firstScrapeSeries are the counter series a controller that has seen no
// event exports at 0: every label value of the labelled counters, and the
// per-lock counters of each declared lock (runs is true for a run_once
// lock).
func firstScrapeSeries(locks map[string]bool) []string {
	var out []string
	add := func(name, label string, values ...string) {
		for _, v := range values {
			out = append(out, fmt.Sprintf("%s{%s=%q}", name, label, v))
		}
	}
	kinds := func(ks []compliance.Kind) []string {
		var s []string
		for _, k := range ks {
			s = append(s, string(k))
		}
		return s
	}
	add("consullock_violations_total", "reason", violationReasons...)
	add("consullock_drift_total", "kind", kinds(driftKinds)...)
	add("consullock_repairs_total", "kind", kinds(repairKinds)...)
	add("consullock_repair_errors_total", "kind", kinds(repairKinds)...)
	add("consullock_watch_errors_total", "watch", watchNames...)
	for lock, runs := range locks {
		out = append(out, lockSeries("consullock_lock_handovers_total", lock))
		if runs {
			out = append(out, lockSeries("consullock_lock_missed_slots_total", lock))
			for _, o := range runOutcomeLabels {
				out = append(out, fmt.Sprintf("consullock_lock_runs_total{lock=%q,outcome=%q}", lock, o))
			}
		}
	}
	slices.Sort(out)
	return out
}

// A counter that appears at 1 on its first event reads as no increase in
// increase() and rate(): the first violation, failed repair, failed watch
// or hand-over would never alert. Every counter is exported at 0 from the
// controller's first scrape, per declared lock for the per-lock ones; a
// lock declared later gets its series at 0, and a lock no longer declared
// loses them.
func TestMetrics_everyCounterIsExportedAtZeroFromTheFirstScrape(t *testing.T) {
	h := newHarness(t, agent)
	job := h.declareLock(lockmodel.Lock{Name: h.name("job"), Prefix: h.prefix + "/job"})
	nightly := h.declareLock(lockmodel.Lock{Name: h.name("nightly"), Prefix: h.prefix + "/nightly",
		RunOnce: &ledger.RunOnce{Period: 24 * time.Hour, Since: time.Now()}})
	for _, l := range []lockmodel.Lock{job, nightly} {
		if _, err := h.api.KV().Put(&api.KVPair{Key: l.Key, Flags: l.Flags()}, nil); err != nil {
			t.Fatal(err)
		}
	}
	c := h.startWith(startOpts{mode: compliance.ModeObserve})
	srv := httptest.NewServer(c.Handler())
	defer srv.Close()

	// The first scrape after the initial sync: nothing has happened.
	got := scrape(t, srv.URL)
	want := firstScrapeSeries(map[string]bool{job.Name: false, nightly.Name: true})
	for _, series := range want {
		if v, ok := got[series]; !ok || v != 0 {
			t.Errorf("first scrape: %s = %v (exported: %v), want 0", series, v, ok)
		}
	}
	t.Logf("first scrape: %d counter series at 0", len(want))

	// A lock declared later has its counters at 0 from the first scrape
	// that knows it; one no longer declared has none.
	later := h.declareLock(lockmodel.Lock{Name: h.name("later"), Prefix: h.prefix + "/later"})
	if _, err := h.api.KV().Delete(lockmodel.RegistryKey(h.registry, lockmodel.KindLock, job.Name), nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() error {
		got = scrape(t, srv.URL)
		if v, ok := got[lockSeries("consullock_lock_handovers_total", later.Name)]; !ok || v != 0 {
			return fmt.Errorf("handovers of %s: %v (exported: %v), want 0", later.Name, v, ok)
		}
		if v, ok := got[lockSeries("consullock_lock_handovers_total", job.Name)]; ok {
			return fmt.Errorf("handovers of %s, no longer declared: %v", job.Name, v)
		}
		return nil
	})
}

// The label value lists cover every kind and reason the compliance
// decision and the profile check can produce (read from their source, so
// that a new one without its series at 0 fails here), and every kind is
// either a repair the controller makes or one it only reports.
func TestMetrics_labelValuesCoverEveryKindAndReason(t *testing.T) {
	kinds := constants(t, "../compliance", func(name string, typ ast.Expr) bool {
		id, ok := typ.(*ast.Ident)
		return ok && id.Name == "Kind"
	})
	reasons := append(constants(t, "../lockmodel", func(name string, _ ast.Expr) bool { return strings.HasPrefix(name, "Violation") }),
		constants(t, "../compliance", func(name string, _ ast.Expr) bool { return strings.HasPrefix(name, "Reason") })...)
	if len(kinds) < 10 || len(reasons) < 7 {
		t.Fatalf("read %d kinds and %d reasons from the source: the parsing is wrong", len(kinds), len(reasons))
	}
	// The kinds that are only ever reported (compliance: "Kinds that are
	// only ever reported"); every other kind is a repair.
	reportOnly := []compliance.Kind{compliance.KindHeldKeyDrift, compliance.KindUnusableKey, compliance.KindACLPolicyMissing,
		compliance.KindProfileMissing, compliance.KindHolderNonCompliant, compliance.KindHolderPredatesProfile}
	for _, v := range kinds {
		k := compliance.Kind(v)
		if k.IsDrift() != slices.Contains(driftKinds, k) {
			t.Errorf("kind %s: IsDrift %v, in driftKinds %v", k, k.IsDrift(), slices.Contains(driftKinds, k))
		}
		if slices.Contains(repairKinds, k) == slices.Contains(reportOnly, k) {
			t.Errorf("kind %s is neither a repair (repairKinds) nor report-only, or both", k)
		}
	}
	for _, r := range reasons {
		if !slices.Contains(violationReasons, r) {
			t.Errorf("violation reason %s is not in violationReasons", r)
		}
	}
}

// constants returns the values of the string constants declared in the
// non-test files of dir whose name and type keep accepts.
func constants(t *testing.T, dir string, keep func(name string, typ ast.Expr) bool) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, e.Name()), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				vs, ok := s.(*ast.ValueSpec)
				if !ok {
					continue
				}
				for i, n := range vs.Names {
					if i >= len(vs.Values) || !keep(n.Name, vs.Type) {
						continue
					}
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						v, err := strconv.Unquote(lit.Value)
						if err != nil {
							t.Fatal(err)
						}
						out = append(out, v)
					}
				}
			}
		}
	}
	return out
}
