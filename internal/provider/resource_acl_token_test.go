package provider

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/terraform-plugin-framework-timetypes/timetypes"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
	tfresource "github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

const tokenAddr = "consullock_acl_token.t"

// tokenConfig declares aclPolicyConfig's policy and a token holding it.
func tokenConfig(name, prefix string, agentRead bool, tokenAttrs string) string {
	return aclPolicyConfig(name, prefix, agentRead, "") + fmt.Sprintf(`
resource "consullock_acl_token" "t" {
  policies = [consullock_acl_policy.p.name]
  %s
}
`, tokenAttrs)
}

func tokenAttr(s *terraform.State, attr string) (string, error) {
	rs, ok := s.RootModule().Resources[tokenAddr]
	if !ok {
		return "", fmt.Errorf("%s is not in state", tokenAddr)
	}
	v := rs.Primary.Attributes[attr]
	if v == "" {
		return "", fmt.Errorf("%s.%s is empty", tokenAddr, attr)
	}
	return v, nil
}

// consulLock runs the real `consul lock` CLI with only token in its
// environment and returns its combined output.
func consulLock(token string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, agent.Bin, append([]string{"lock", "-timeout=20s"}, args...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CONSUL_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "CONSUL_HTTP_ADDR="+agent.Addr, "CONSUL_HTTP_TOKEN="+token)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// expectDenied checks that err is Consul's HTTP 403 permission denial.
func expectDenied(what string, err error) error {
	if err == nil {
		return fmt.Errorf("%s: allowed, want HTTP 403", what)
	}
	if !strings.Contains(err.Error(), "403") || !strings.Contains(err.Error(), "Permission denied") {
		return fmt.Errorf("%s: got %v, want HTTP 403 Permission denied", what, err)
	}
	return nil
}

// checkConsulLockCLI: `consul lock` acquires the mutex and the semaphore
// (-n 3) with only the token from state.
func checkConsulLockCLI(prefix string) tfresource.TestCheckFunc {
	return func(s *terraform.State) error {
		secret, err := tokenAttr(s, "secret_id")
		if err != nil {
			return err
		}
		for _, args := range [][]string{
			{prefix + "/mutex", "echo child-ran"},
			{"-n", "3", prefix + "/sem", "echo child-ran"},
		} {
			out, err := consulLock(secret, args...)
			if err != nil || !strings.Contains(out, "child-ran") {
				return fmt.Errorf("consul lock %s with the policy's token: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
		return nil
	}
}

// checkLeastPrivilege: the token can do its raw acquire and nothing else.
func checkLeastPrivilege(prefix string) tfresource.TestCheckFunc {
	return func(s *terraform.State) error {
		secret, err := tokenAttr(s, "secret_id")
		if err != nil {
			return err
		}
		c := agent.ClientWithToken(secret)

		// The raw acquire API: a session on the agent's node, then the key.
		sess, _, err := c.Session().Create(&api.SessionEntry{Node: agent.NodeName, Name: "raw-holder", TTL: "15s"}, nil)
		if err != nil {
			return fmt.Errorf("creating a session on %s with the policy's token: %v", agent.NodeName, err)
		}
		defer func() { _, _ = agent.Client().Session().Destroy(sess, nil) }()
		mutex := &api.KVPair{Key: prefix + "/mutex/.lock", Session: sess, Flags: lockmodel.LockFlagValue}
		ok, _, err := c.KV().Acquire(mutex, nil)
		if err != nil || !ok {
			return fmt.Errorf("raw acquire of %s with the policy's token: ok=%v err=%v", mutex.Key, ok, err)
		}
		defer func() { _, _, _ = c.KV().Release(mutex, nil) }()

		var errs []string
		add := func(err error) {
			if err != nil {
				errs = append(errs, err.Error())
			}
		}
		_, _, err = c.KV().Acquire(&api.KVPair{Key: prefix + "/other/.lock", Session: sess}, nil)
		add(expectDenied("acquiring another lock key", err))
		_, err = c.KV().Put(&api.KVPair{Key: prefix + "/sem-sibling/x", Value: []byte("x")}, nil)
		add(expectDenied("writing a key outside the semaphore prefix", err))
		_, err = c.KV().Put(&api.KVPair{Key: prefix + "/decl", Value: []byte("x")}, nil)
		add(expectDenied("writing a read-only key", err))
		_, _, err = c.Session().Create(&api.SessionEntry{Node: "elsewhere", Name: "raw-holder"}, nil)
		add(expectDenied("creating a session on a node outside session_node_prefixes", err))
		_, _, err = c.ACL().PolicyList(nil)
		add(expectDenied("listing ACL policies", err))
		_, _, err = c.ACL().TokenList(nil)
		add(expectDenied("listing ACL tokens", err))

		// Without any token (the anonymous token), the acquire is denied.
		// The api client would fall back to CONSUL_HTTP_TOKEN, so use HTTP.
		req, _ := http.NewRequest(http.MethodPut, agent.HTTPAddr()+"/v1/kv/"+prefix+"/mutex/.lock?acquire="+sess, strings.NewReader("x"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			errs = append(errs, fmt.Sprintf("acquire without a token: HTTP %d, want 403", resp.StatusCode))
		}
		if len(errs) > 0 {
			return fmt.Errorf("least privilege violated:\n%s", strings.Join(errs, "\n"))
		}
		return nil
	}
}

// checkConsulLockNeedsAgentRead: without agent_read, `consul lock` cannot
// learn its node name and fails, with a permission error.
func checkConsulLockNeedsAgentRead(prefix string) tfresource.TestCheckFunc {
	return func(s *terraform.State) error {
		secret, err := tokenAttr(s, "secret_id")
		if err != nil {
			return err
		}
		out, err := consulLock(secret, prefix+"/mutex", "echo child-ran")
		if err == nil || strings.Contains(out, "child-ran") {
			return fmt.Errorf("consul lock succeeded without agent_read:\n%s", out)
		}
		if !strings.Contains(out, "403") || !strings.Contains(out, "agent:read") {
			return fmt.Errorf("consul lock failed, but not for lack of agent:read:\n%s", out)
		}
		return nil
	}
}

func TestAccACLToken_leastPrivilegeProvenWithConsulLock(t *testing.T) {
	name, prefix := aclTestNames(t)
	tfresource.Test(t, tfresource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             checkPolicyDestroyed(name),
		Steps: []tfresource.TestStep{
			{
				Config: tokenConfig(name, prefix, true, ""),
				Check: tfresource.ComposeTestCheckFunc(
					checkConsulLockCLI(prefix),
					checkLeastPrivilege(prefix),
				),
			},
			{
				Config: tokenConfig(name, prefix, false, ""),
				ConfigPlanChecks: tfresource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction("consullock_acl_policy.p", plancheck.ResourceActionUpdate),
						plancheck.ExpectResourceAction(tokenAddr, plancheck.ResourceActionNoop),
					},
				},
				Check: tfresource.ComposeTestCheckFunc(
					checkConsulLockNeedsAgentRead(prefix),
					checkLeastPrivilege(prefix),
				),
			},
		},
	})
}

func checkTokenLive(s *terraform.State) error {
	accessor, err := tokenAttr(s, "accessor_id")
	if err != nil {
		return err
	}
	secret, err := tokenAttr(s, "secret_id")
	if err != nil {
		return err
	}
	live, _, err := agent.Client().ACL().TokenRead(accessor, nil)
	if err != nil {
		return err
	}
	if live.SecretID != secret {
		return fmt.Errorf("secret_id in state is not the token's secret")
	}
	if got := s.RootModule().Resources[tokenAddr].Primary.Attributes["description"]; live.Description != got {
		return fmt.Errorf("live description %q, state %q", live.Description, got)
	}
	return nil
}

func TestAccACLToken_importByAccessorIDAndUpdateInPlace(t *testing.T) {
	name, prefix := aclTestNames(t)
	sameSecret := statecheck.CompareValue(compareSame{})
	sameAccessor := statecheck.CompareValue(compareSame{})
	var accessor string
	importByAccessor := func(*terraform.State) (string, error) { return accessor, nil }
	tfresource.Test(t, tfresource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             checkPolicyDestroyed(name),
		Steps: []tfresource.TestStep{
			{
				Config: tokenConfig(name, prefix, true, `description = "first"`),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectSensitiveValue(tokenAddr, tfjsonpath.New("secret_id")),
					statecheck.ExpectKnownValue(tokenAddr, tfjsonpath.New("accessor_id"), knownvalue.StringRegexp(aclUUID)),
					statecheck.ExpectKnownValue(tokenAddr, tfjsonpath.New("policies"), knownvalue.SetExact([]knownvalue.Check{knownvalue.StringExact(name)})),
					statecheck.ExpectKnownValue(tokenAddr, tfjsonpath.New("expiration_time"), knownvalue.Null()),
					sameSecret.AddStateValue(tokenAddr, tfjsonpath.New("secret_id")),
					sameAccessor.AddStateValue(tokenAddr, tfjsonpath.New("accessor_id")),
				},
				Check: tfresource.ComposeTestCheckFunc(checkTokenLive, func(s *terraform.State) error {
					accessor, _ = tokenAttr(s, "accessor_id")
					return nil
				}),
			},
			{
				ResourceName:      tokenAddr,
				ImportState:       true,
				ImportStateIdFunc: importByAccessor,
				ImportStateVerify: true,
			},
			{
				Config: tokenConfig(name, prefix, true, `description = "second"`),
				ConfigPlanChecks: tfresource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction(tokenAddr, plancheck.ResourceActionUpdate),
						plancheck.ExpectSensitiveValue(tokenAddr, tfjsonpath.New("secret_id")),
					},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					sameSecret.AddStateValue(tokenAddr, tfjsonpath.New("secret_id")),
					sameAccessor.AddStateValue(tokenAddr, tfjsonpath.New("accessor_id")),
				},
				Check: checkTokenLive,
			},
			{
				// Deleted out of band: gone for certain, so plan creates it.
				PreConfig: func() {
					if err := agent.DeleteToken(accessor); err != nil {
						t.Fatal(err)
					}
				},
				Config: tokenConfig(name, prefix, true, `description = "second"`),
				ConfigPlanChecks: tfresource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(tokenAddr, plancheck.ResourceActionCreate)},
				},
				Check: checkTokenLive,
			},
			{
				Config: tokenConfig(name, prefix, true, "description = \"second\"\nlocal = true"),
				ConfigPlanChecks: tfresource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(tokenAddr, plancheck.ResourceActionDestroyBeforeCreate)},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(tokenAddr, tfjsonpath.New("local"), knownvalue.Bool(true)),
				},
				Check: checkTokenLive,
			},
			{
				Config: tokenConfig(name, prefix, true, "description = \"second\"\nexpiration_ttl = \"1h\""),
				ConfigPlanChecks: tfresource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(tokenAddr, plancheck.ResourceActionDestroyBeforeCreate)},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(tokenAddr, tfjsonpath.New("expiration_time"), knownvalue.StringRegexp(regexp.MustCompile(`^\d{4}-\d\d-\d\dT`))),
				},
				Check: tfresource.ComposeTestCheckFunc(checkTokenLive, func(s *terraform.State) error {
					accessor, _ = tokenAttr(s, "accessor_id")
					live, _, err := agent.Client().ACL().TokenRead(accessor, nil)
					if err != nil {
						return err
					}
					if live.ExpirationTime == nil || live.ExpirationTime.Sub(live.CreateTime) != time.Hour {
						return fmt.Errorf("live token expiration %v, created %v; want 1h later", live.ExpirationTime, live.CreateTime)
					}
					return nil
				}),
			},
		},
	})
}

// TestAccACLToken_importedExpirationTTLIsNotReplaced imports a token made
// outside OpenTofu with a 1h TTL: import reads it back as "1h0m0s", which
// is the configured "1h" in other words, so the plan is empty rather than
// a replacement.
func TestAccACLToken_importedExpirationTTLIsNotReplaced(t *testing.T) {
	name, _ := aclTestNames(t)
	tok, err := agent.MintToken(name, `key "x" { policy = "read" }`, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = agent.Client().ACL().PolicyDelete(tok.PolicyID, nil) })
	// The explicit source matters: an import step that persists its state
	// writes the configuration as given, without the testing framework's
	// provider requirements.
	config := fmt.Sprintf(`
terraform {
  required_providers {
    consullock = { source = %[2]q }
  }
}

resource "consullock_acl_token" "t" {
  description    = %[1]q
  policies       = [%[1]q]
  expiration_ttl = "1h"
}
`, name, testAccProviderSource())
	tfresource.Test(t, tfresource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []tfresource.TestStep{
			{
				Config:             config,
				ResourceName:       tokenAddr,
				ImportState:        true,
				ImportStateId:      tok.AccessorID,
				ImportStatePersist: true,
				ImportStateCheck: func(states []*terraform.InstanceState) error {
					if len(states) != 1 {
						return fmt.Errorf("imported %d objects", len(states))
					}
					a := states[0].Attributes
					if a["expiration_ttl"] != "1h0m0s" || a["accessor_id"] != tok.AccessorID || a["secret_id"] != tok.SecretID {
						return fmt.Errorf("imported expiration_ttl %q, accessor %q; want 1h0m0s, %s and the secret",
							a["expiration_ttl"], a["accessor_id"], tok.AccessorID)
					}
					return nil
				},
			},
			{
				Config: config,
				ConfigPlanChecks: tfresource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
			},
		},
	})
}

func TestAccACLToken_rejectsBadInputAtPlan(t *testing.T) {
	name, prefix := aclTestNames(t)
	tfresource.Test(t, tfresource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []tfresource.TestStep{
			{
				Config:      tokenConfig(name, prefix, true, `expiration_ttl = "30s"`),
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(`(?s)Duration Out of Range.*expiration_ttl:\s+"30s"\s+is\s+not\s+allowed;\s+use\s+a\s+duration\s+from\s+1m0s`),
			},
			{
				Config:      tokenConfig(name, prefix, true, `expiration_ttl = "soon"`),
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(`(?s)expiration_ttl`),
			},
			{
				Config: `resource "consullock_acl_token" "t" {
  policies = ["my policy"]
}`,
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(`Attribute\s+policies\[Value\("my policy"\)\]\s+must\s+be\s+a\s+policy\s+name\s+\(1\s+to\s+128`),
			},
		},
	})
}

// TestAccACLToken_secretNeverInLogs runs create, import, update and
// refresh with every log at TRACE into one file (OpenTofu's and the
// provider's), then looks for the secret in it.
func TestAccACLToken_secretNeverInLogs(t *testing.T) {
	name, prefix := aclTestNames(t)
	logFile := filepath.Join(t.TempDir(), "trace.log")
	t.Setenv("TF_LOG", "TRACE")
	t.Setenv("TF_ACC_LOG", "TRACE")
	t.Setenv("TF_ACC_LOG_PATH", logFile)
	t.Setenv("TF_LOG_PATH", logFile)
	var secret, accessor string
	tfresource.Test(t, tfresource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             checkPolicyDestroyed(name),
		Steps: []tfresource.TestStep{
			{
				Config: tokenConfig(name, prefix, true, `description = "first"`),
				Check: func(s *terraform.State) error {
					secret, _ = tokenAttr(s, "secret_id")
					accessor, _ = tokenAttr(s, "accessor_id")
					return nil
				},
			},
			{
				ResourceName:      tokenAddr,
				ImportState:       true,
				ImportStateIdFunc: func(*terraform.State) (string, error) { return accessor, nil },
				ImportStateVerify: true,
			},
			{Config: tokenConfig(name, prefix, true, `description = "second"`)},
			{RefreshState: true},
		},
	})
	data, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	if secret == "" || accessor == "" {
		t.Fatal("the token's secret and accessor were not captured")
	}
	// Proof that the log is the real thing: OpenTofu traced, and the
	// provider logged the token by its accessor ID.
	log := string(data)
	if !strings.Contains(log, "[TRACE]") || !strings.Contains(log, accessor) || !strings.Contains(log, "created ACL token") {
		t.Fatalf("the trace log (%d bytes) lacks OpenTofu's or the provider's entries", len(data))
	}
	if strings.Contains(log, secret) {
		for _, line := range strings.Split(log, "\n") {
			if strings.Contains(line, secret) {
				t.Errorf("secret logged: %.300s", strings.ReplaceAll(line, secret, "<SECRET>"))
			}
		}
	}
}

func aclTestTokenModel(accessor string) aclTokenModel {
	return aclTokenModel{
		ID:                types.StringValue(accessor),
		AccessorID:        types.StringValue(accessor),
		SecretID:          types.StringValue(testenv.NewUUID()),
		Description:       types.StringValue(""),
		Policies:          types.SetNull(types.StringType),
		Roles:             types.SetNull(types.StringType),
		ServiceIdentities: types.SetNull(serviceIdentityType),
		NodeIdentities:    types.SetNull(nodeIdentityType),
		Local:             types.BoolValue(false),
		ExpirationTTL:     timetypes.NewGoDurationNull(),
		ExpirationTime:    timetypes.NewRFC3339Null(),
	}
}

func TestACLTokenRead_invalidProviderTokenKeepsState(t *testing.T) {
	r := &aclTokenResource{data: aclTestProviderData(t, testenv.NewUUID())}
	model := aclTestTokenModel(testenv.NewUUID())
	state := aclTestResourceState(t, r, model)
	resp := resource.ReadResponse{State: state}
	r.Read(context.Background(), resource.ReadRequest{State: state}, &resp)
	if !resp.Diagnostics.HasError() {
		t.Fatal("Read with an unknown provider token reported no error")
	}
	if resp.State.Raw.IsNull() {
		t.Fatal("Read removed the token from state on an invalid provider token")
	}
	detail := resp.Diagnostics.Errors()[0].Detail()
	if !strings.Contains(detail, "the provider's token is invalid or expired") {
		t.Errorf("error detail does not say the token is the problem:\n%s", detail)
	}
	if strings.Contains(fmt.Sprint(resp.Diagnostics), model.SecretID.ValueString()) {
		t.Error("the diagnostics contain the token's secret")
	}
}

func TestACLTokenRead_missingTokenIsRemovedFromState(t *testing.T) {
	r := &aclTokenResource{data: aclTestProviderData(t, agent.ManagementToken)}
	state := aclTestResourceState(t, r, aclTestTokenModel(testenv.NewUUID()))
	resp := resource.ReadResponse{State: state}
	r.Read(context.Background(), resource.ReadRequest{State: state}, &resp)
	if resp.Diagnostics.HasError() {
		t.Fatalf("Read: %v", resp.Diagnostics)
	}
	if !resp.State.Raw.IsNull() {
		t.Fatal("Read kept a token Consul does not have, with a valid provider token")
	}
}

// compareSame is compare.ValuesSame without the values in its error: one
// of them is a secret.
type compareSame struct{}

func (compareSame) CompareValues(values ...any) error {
	for i := 1; i < len(values); i++ {
		if fmt.Sprint(values[i]) != fmt.Sprint(values[0]) {
			return fmt.Errorf("value %d differs from the first", i)
		}
	}
	return nil
}

// outOfBand changes what token accessor holds through the Consul API, as an
// operator with the management token would, keeping its description.
func outOfBand(t *testing.T, accessor string, change func(*api.ACLToken)) {
	t.Helper()
	acl := agent.Client().ACL()
	live, _, err := acl.TokenRead(accessor, nil)
	if err != nil {
		t.Fatal(err)
	}
	change(live)
	live.SecretID = "" // keep the secret
	if _, _, err := acl.TokenUpdate(live, nil); err != nil {
		t.Fatal(err)
	}
}

// createRole makes an ACL role (no policies: what matters is the link).
func createRole(t *testing.T, name string) {
	t.Helper()
	role, _, err := agent.Client().ACL().RoleCreate(&api.ACLRole{Name: name, Description: "test role"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = agent.Client().ACL().RoleDelete(role.ID, nil) })
}

// liveHoldings is what the token in state holds in Consul, by name.
func liveHoldings(s *terraform.State) (tokenHoldings, error) {
	accessor, err := tokenAttr(s, "accessor_id")
	if err != nil {
		return tokenHoldings{}, err
	}
	live, _, err := agent.Client().ACL().TokenRead(accessor, nil)
	if err != nil {
		return tokenHoldings{}, err
	}
	return holdingsOf(live), nil
}

func checkLiveHoldings(want string) tfresource.TestCheckFunc {
	return func(s *terraform.State) error {
		h, err := liveHoldings(s)
		if err != nil {
			return err
		}
		if got := h.String(); got != want {
			return fmt.Errorf("token holds %s, want %s", got, want)
		}
		return nil
	}
}

// TestAccACLToken_outOfBandHoldingsAreDriftAndRemoved: roles, service
// identities and node identities added to the token through the Consul API
// are drift that plan shows and apply removes; declared ones are kept by an
// unrelated update; one added out of band next to an unrelated change shows
// in that plan too.
func TestAccACLToken_outOfBandHoldingsAreDriftAndRemoved(t *testing.T) {
	name, prefix := aclTestNames(t)
	role, role2, renamed := name+"-r1", name+"-r2", name+"-renamed"
	createRole(t, role)
	createRole(t, role2)
	var accessor string
	declared := fmt.Sprintf(`
  roles = [%q]
  service_identities = [{ service_name = "web", datacenters = ["dc1"] }]
  node_identities    = [{ node_name = "worker-1", datacenter = "dc1" }]
`, role)
	declaredHoldings := fmt.Sprintf("[policy %s, role %s, service identity web in dc1, node identity worker-1 in dc1]", name, role)
	tfresource.Test(t, tfresource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             checkPolicyDestroyed(name, renamed),
		Steps: []tfresource.TestStep{
			{
				Config: tokenConfig(name, prefix, false, `description = "first"`),
				Check: tfresource.ComposeTestCheckFunc(checkLiveHoldings("[policy "+name+"]"), func(s *terraform.State) error {
					accessor, _ = tokenAttr(s, "accessor_id")
					return nil
				}),
			},
			{
				// Added out of band: the plan shows each as a change and
				// apply takes it away.
				PreConfig: func() {
					outOfBand(t, accessor, func(tok *api.ACLToken) {
						tok.Roles = append(tok.Roles, &api.ACLTokenRoleLink{Name: role})
						tok.ServiceIdentities = append(tok.ServiceIdentities, &api.ACLServiceIdentity{ServiceName: "db"})
						tok.NodeIdentities = append(tok.NodeIdentities, &api.ACLNodeIdentity{NodeName: "sneaky", Datacenter: "dc1"})
					})
				},
				Config: tokenConfig(name, prefix, false, `description = "first"`),
				ConfigPlanChecks: tfresource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction(tokenAddr, plancheck.ResourceActionUpdate),
						plancheck.ExpectKnownValue(tokenAddr, tfjsonpath.New("roles"), knownvalue.Null()),
						plancheck.ExpectKnownValue(tokenAddr, tfjsonpath.New("service_identities"), knownvalue.Null()),
						plancheck.ExpectKnownValue(tokenAddr, tfjsonpath.New("node_identities"), knownvalue.Null()),
					},
				},
				Check: checkLiveHoldings("[policy " + name + "]"),
			},
			{
				Config: tokenConfig(name, prefix, false, `description = "first"`+declared),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(tokenAddr, tfjsonpath.New("roles"), knownvalue.SetExact([]knownvalue.Check{knownvalue.StringExact(role)})),
					statecheck.ExpectKnownValue(tokenAddr, tfjsonpath.New("service_identities"), knownvalue.SetExact([]knownvalue.Check{
						knownvalue.ObjectExact(map[string]knownvalue.Check{
							"service_name": knownvalue.StringExact("web"),
							"datacenters":  knownvalue.SetExact([]knownvalue.Check{knownvalue.StringExact("dc1")}),
						}),
					})),
				},
				Check: checkLiveHoldings(declaredHoldings),
			},
			{
				// An unrelated update keeps what is declared.
				Config: tokenConfig(name, prefix, false, `description = "second"`+declared),
				ConfigPlanChecks: tfresource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(tokenAddr, plancheck.ResourceActionUpdate)},
				},
				Check: checkLiveHoldings(declaredHoldings),
			},
			{
				// Out of band next to an unrelated change: the plan shows
				// the removal, not only the description.
				PreConfig: func() {
					outOfBand(t, accessor, func(tok *api.ACLToken) {
						tok.Roles = append(tok.Roles, &api.ACLTokenRoleLink{Name: role2})
					})
				},
				Config: tokenConfig(name, prefix, false, `description = "third"`+declared),
				ConfigPlanChecks: tfresource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction(tokenAddr, plancheck.ResourceActionUpdate),
						plancheck.ExpectKnownValue(tokenAddr, tfjsonpath.New("roles"), knownvalue.SetExact([]knownvalue.Check{knownvalue.StringExact(role)})),
					},
				},
				Check: checkLiveHoldings(declaredHoldings),
			},
			{
				// Renaming the policy in the same apply is no change made
				// outside OpenTofu: the link reads back under the new name.
				Config: tokenConfig(renamed, prefix, false, `description = "fourth"`+declared),
				Check:  checkLiveHoldings(strings.Replace(declaredHoldings, "policy "+name, "policy "+renamed, 1)),
			},
			{
				ResourceName:      tokenAddr,
				ImportState:       true,
				ImportStateIdFunc: func(*terraform.State) (string, error) { return accessor, nil },
				ImportStateVerify: true,
			},
		},
	})
}

// TestACLTokenUpdate_refusesToRemoveWhatThePlanDidNotShow: an update whose
// plan was made before something was added to the token (or with
// -refresh=false) must not strip it unseen.
func TestACLTokenUpdate_refusesToRemoveWhatThePlanDidNotShow(t *testing.T) {
	ctx := context.Background()
	acl := agent.Client().ACL()
	created, _, err := acl.TokenCreate(&api.ACLToken{Description: "before"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = acl.TokenDelete(created.AccessorID, nil) })
	outOfBand(t, created.AccessorID, func(tok *api.ACLToken) {
		tok.NodeIdentities = []*api.ACLNodeIdentity{{NodeName: "late", Datacenter: "dc1"}}
	})

	r := &aclTokenResource{data: aclTestProviderData(t, agent.ManagementToken)}
	stateModel := aclTestTokenModel(created.AccessorID)
	stateModel.Description = types.StringValue("before")
	planModel := stateModel
	planModel.Description = types.StringValue("after")
	state := aclTestResourceState(t, r, stateModel)
	plan := tfsdk.Plan{Schema: state.Schema, Raw: aclTestResourceState(t, r, planModel).Raw}
	resp := resource.UpdateResponse{State: state}
	r.Update(ctx, resource.UpdateRequest{Plan: plan, State: state}, &resp)
	if !resp.Diagnostics.HasError() || !strings.Contains(fmt.Sprint(resp.Diagnostics), "ACL Token Changed Outside OpenTofu") {
		t.Fatalf("Update over an unseen node identity: %v; want the ACL Token Changed Outside OpenTofu error", resp.Diagnostics)
	}
	live, _, err := acl.TokenRead(created.AccessorID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(live.NodeIdentities) != 1 || live.Description != "before" {
		t.Fatalf("the token was changed anyway: description %q, node identities %d", live.Description, len(live.NodeIdentities))
	}
}
