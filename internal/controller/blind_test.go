package controller

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/compliance"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

// readyz is the controller's /readyz answer.
func readyz(t *testing.T, c *Controller) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	c.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	body, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(body)
}

// TestReadyz_blindIsNotReady: a controller whose token cannot read the
// registry sees no declaration, which Consul does not report as a denial
// (a listing is filtered, silently for a request without a token): its
// /readyz answers 503 with a "blind:" reason naming the token, for no
// token, the anonymous token and a token with no rules, on an empty and a
// populated registry. A reader is ready.
func TestReadyz_blindIsNotReady(t *testing.T) {
	h := newHarness(t, agent)
	noRules, err := agent.MintToken(h.name("blind-none"), `key_prefix "nothing/" { policy = "read" }`, 0)
	if err != nil {
		t.Fatal(err)
	}
	reader, err := agent.MintToken(h.name("blind-reader"), `key_prefix "" { policy = "read" }
session_prefix "" { policy = "read" }
acl = "read"`, 0)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct{ name, token, names string }{
		{"no token", "none", "no token set"},
		{"anonymous", "anonymous", "the anonymous token"},
		{"token with no rules", noRules.SecretID, noRules.AccessorID},
	}
	check := func(registry string) {
		for _, tc := range cases {
			c := h.startWith(startOpts{mode: compliance.ModeObserve, token: tc.token, noWait: true})
			eventually(t, 10*time.Second, func() error {
				code, body := readyz(t, c.Controller)
				if code != http.StatusServiceUnavailable || !strings.Contains(body, "blind:") || !strings.Contains(body, tc.names) {
					return fmt.Errorf("%s, %s registry: /readyz %d %q; want 503 with a blind: reason naming %q", tc.name, registry, code, body, tc.names)
				}
				return nil
			})
			c.stop()
		}
		c := h.startWith(startOpts{mode: compliance.ModeObserve, token: reader.SecretID})
		if code, body := readyz(t, c.Controller); code != http.StatusOK {
			t.Errorf("reader, %s registry: /readyz %d %q; want 200", registry, code, body)
		}
		c.stop()
	}
	check("empty")
	h.declareProfile(lockmodel.SessionProfile{Name: h.name("p"), TTL: 15 * time.Second, LockDelay: 15 * time.Second})
	check("populated")
}
