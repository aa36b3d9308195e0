package status

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

// TestStatusBlindIsNotHealthy: a status that sees no declaration because
// its token cannot read the registry exits 3 and names the token, whether
// the token is missing (Consul answers as the anonymous token, default
// deny), the anonymous token itself, or a valid token without key:read on
// the registry prefix; with the registry empty too, where Consul filters
// nothing it could report. A reader token passes, registry empty or not.
func TestStatusBlindIsNotHealthy(t *testing.T) {
	f := newFixture(t)
	_, rules, _ := f.run("-print-rules")
	noRules, err := agent.MintToken(policyName("blind-none"), `key_prefix "nothing/" { policy = "read" }`, 0)
	if err != nil {
		t.Fatal(err)
	}
	reader, err := agent.MintToken(policyName("blind-reader"), rules, 0)
	if err != nil {
		t.Fatal(err)
	}
	blind := []struct {
		name, token, says string
	}{
		{"missing token", "", "no token is set"},
		{"anonymous", "anonymous", "the anonymous token"},
		{"token with no rules", noRules.SecretID, noRules.AccessorID},
	}
	check := func(registry string) {
		for _, tc := range blind {
			t.Setenv("CONSUL_HTTP_TOKEN", tc.token)
			code, out, errs := f.run()
			if code != ExitUnreachable || !strings.Contains(errs, "Blind") || !strings.Contains(errs, tc.says) ||
				!strings.Contains(errs, "CONSUL_HTTP_TOKEN") || !strings.Contains(errs, f.registry+"/") {
				t.Errorf("%s, %s registry: exit %d, stdout %q, stderr %q; want 3 naming the token (%q) and the registry", tc.name, registry, code, out, errs, tc.says)
			}
			if tc.token != "" && tc.token != "anonymous" && strings.Contains(errs, tc.token) {
				t.Fatalf("%s: the secret appears in the error", tc.name)
			}
		}
		t.Setenv("CONSUL_HTTP_TOKEN", reader.SecretID)
		if code, out, errs := f.run(); code != ExitOK {
			t.Errorf("reader, %s registry: exit %d, stdout %s, stderr %s; want 0", registry, code, out, errs)
		}
	}
	check("empty")
	t.Setenv("CONSUL_HTTP_TOKEN", agent.ManagementToken)
	f.profile(strict)
	f.lock(lockmodel.Lock{Name: "job", SessionDefaults: "strict"}, false)
	check("populated")
}

// -log-format json: status's diagnostics on stderr are one JSON event a
// line, with the controller's keys (time, level, msg).
func TestStatusLogFormatJSON(t *testing.T) {
	f := newFixture(t)
	t.Setenv("CONSUL_HTTP_TOKEN", "")
	code, _, errs := f.run("-log-format", "json")
	var event map[string]any
	if err := json.Unmarshal([]byte(strings.TrimSpace(errs)), &event); err != nil || code != ExitUnreachable {
		t.Fatalf("exit %d, stderr %q (%v); want 3 and one JSON event", code, errs, err)
	}
	if event["level"] != "ERROR" || !strings.HasPrefix(fmt.Sprint(event["msg"]), "Blind:") || event["time"] == nil {
		t.Errorf("event %v; want level ERROR, msg Blind: ..., time", event)
	}
	if code, _, errs := f.run("-log-format", "xml"); code != ExitUsage || !strings.Contains(errs, "-log-format") {
		t.Errorf("-log-format xml: exit %d, %s; want 2 naming the flag", code, errs)
	}
}
