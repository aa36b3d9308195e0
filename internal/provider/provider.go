// Package provider is the consullock Terraform/OpenTofu provider.
package provider

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timetypes/timetypes"
	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/ephemeral"
	"github.com/hashicorp/terraform-plugin-framework/function"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-go/tftypes"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

var (
	_ provider.Provider                       = (*consullockProvider)(nil)
	_ provider.ProviderWithValidateConfig     = (*consullockProvider)(nil)
	_ provider.ProviderWithEphemeralResources = (*consullockProvider)(nil)
	_ provider.ProviderWithFunctions          = (*consullockProvider)(nil)
)

// New returns a provider factory for providerserver.
func New(version string) func() provider.Provider {
	return func() provider.Provider {
		return &consullockProvider{version: version}
	}
}

type consullockProvider struct {
	version string
}

// providerModel is the provider block.
type providerModel struct {
	Address            types.String `tfsdk:"address"`
	Scheme             types.String `tfsdk:"scheme"`
	Token              types.String `tfsdk:"token"`
	TokenFile          types.String `tfsdk:"token_file"`
	Datacenter         types.String `tfsdk:"datacenter"`
	Namespace          types.String `tfsdk:"namespace"`
	Partition          types.String `tfsdk:"partition"`
	CAFile             types.String `tfsdk:"ca_file"`
	CAPEM              types.String `tfsdk:"ca_pem"`
	CertFile           types.String `tfsdk:"cert_file"`
	CertPEM            types.String `tfsdk:"cert_pem"`
	KeyFile            types.String `tfsdk:"key_file"`
	KeyPEM             types.String `tfsdk:"key_pem"`
	TLSServerName      types.String `tfsdk:"tls_server_name"`
	InsecureSkipVerify types.Bool   `tfsdk:"insecure_skip_verify"`
	Headers            types.Map    `tfsdk:"headers"`
	Retry              *retryModel  `tfsdk:"retry"`
	RegistryPrefix     types.String `tfsdk:"registry_prefix"`
}

type retryModel struct {
	MaxAttempts types.Int64          `tfsdk:"max_attempts"`
	MinWait     timetypes.GoDuration `tfsdk:"min_wait"`
	MaxWait     timetypes.GoDuration `tfsdk:"max_wait"`
	MaxElapsed  timetypes.GoDuration `tfsdk:"max_elapsed"`
}

// providerData is what resources and data sources receive in Configure.
type providerData struct {
	client         *consul.Client
	registryPrefix string
	// planned are the declarations of the current plan (ModifyPlan).
	planned *plannedDeclarations
}

func (p *consullockProvider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName = "consullock"
	resp.Version = p.version
}

func (p *consullockProvider) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "Declares Consul leader-election locks, their session profiles and least-privilege ACLs. " +
			"Every setting falls back to the Consul CLI's environment variable, then to the CLI's default. " +
			"A setting that is not known until apply is an error, never a fallback.",
		Attributes: withAttributes(map[string]schema.Attribute{
			"address": schema.StringAttribute{
				MarkdownDescription: "Consul HTTP API address, `host:port` or `https://host:port`. Environment: `CONSUL_HTTP_ADDR`. Default `127.0.0.1:8500`.",
				Optional:            true,
				Validators:          []validator.String{addressValidator{}},
			},
			"scheme": schema.StringAttribute{
				MarkdownDescription: "`http` or `https`. Environment: `CONSUL_HTTP_SSL=true` means `https`. Default `http`, or the scheme given in `address`.",
				Optional:            true,
				Validators:          []validator.String{stringvalidator.OneOf("http", "https")},
			},
			"token": schema.StringAttribute{
				MarkdownDescription: "ACL token. Environment: `CONSUL_HTTP_TOKEN`. Conflicts with `token_file`.",
				Optional:            true,
				Sensitive:           true,
				Validators:          []validator.String{stringvalidator.ConflictsWith(path.MatchRoot("token_file"))},
			},
			"token_file": schema.StringAttribute{
				MarkdownDescription: "File holding the ACL token. Environment: `CONSUL_HTTP_TOKEN_FILE`. Conflicts with `token`.",
				Optional:            true,
			},
			"datacenter": schema.StringAttribute{
				MarkdownDescription: "Datacenter to use. Default: the agent's.",
				Optional:            true,
			},
			"namespace": schema.StringAttribute{
				MarkdownDescription: "Namespace (Consul Enterprise). Environment: `CONSUL_NAMESPACE`.",
				Optional:            true,
			},
			"partition": schema.StringAttribute{
				MarkdownDescription: "Admin partition (Consul Enterprise). Environment: `CONSUL_PARTITION`.",
				Optional:            true,
			},
			"headers": schema.MapAttribute{
				MarkdownDescription: "Extra HTTP headers sent with every request (e.g. for an authenticating proxy). Sensitive, since such headers often carry credentials.",
				Optional:            true,
				Sensitive:           true,
				ElementType:         types.StringType,
			},
			"retry": providerRetryAttribute(),
			"registry_prefix": schema.StringAttribute{
				MarkdownDescription: "KV prefix under which declarations are recorded for the controller and the runner. Default `" + lockmodel.DefaultRegistryPrefix + "`.",
				Optional:            true,
				Validators:          []validator.String{keyPathValidator{}},
			},
		}, providerTLSAttributes()),
	}
}

// providerRetryAttribute is the provider's retry settings.
func providerRetryAttribute() schema.SingleNestedAttribute {
	return schema.SingleNestedAttribute{
		MarkdownDescription: "How transient failures are retried: connection errors, HTTP 429, 502, 503, 504, \"No cluster leader\". " +
			"Never retried: permission errors, missing objects, validation errors, nor a create or check-and-set " +
			"that may have reached Consul (its lost answer is settled by reading back).",
		Optional: true,
		Attributes: map[string]schema.Attribute{
			"max_attempts": schema.Int64Attribute{
				MarkdownDescription: "Attempts per request including the first, 1 to 20. Default `5`.",
				Optional:            true,
				Validators:          []validator.Int64{int64validator.Between(1, 20)},
			},
			"min_wait": schema.StringAttribute{
				MarkdownDescription: "First backoff (doubles per attempt, with jitter). Default `250ms`.",
				Optional:            true,
				CustomType:          timetypes.GoDurationType{},
				Validators:          []validator.String{durationBetween(time.Millisecond, time.Minute)},
			},
			"max_wait": schema.StringAttribute{
				MarkdownDescription: "Longest single backoff. Default `4s`.",
				Optional:            true,
				CustomType:          timetypes.GoDurationType{},
				Validators:          []validator.String{durationBetween(time.Millisecond, 5*time.Minute)},
			},
			"max_elapsed": schema.StringAttribute{
				MarkdownDescription: "No retry starts later than this after the first attempt. Default `30s`.",
				Optional:            true,
				CustomType:          timetypes.GoDurationType{},
				Validators:          []validator.String{durationBetween(time.Millisecond, time.Hour)},
			},
		},
	}
}

// providerTLSAttributes are the provider's TLS settings, as the Consul CLI's.
func providerTLSAttributes() map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"ca_file": schema.StringAttribute{
			MarkdownDescription: "CA certificate file for verifying Consul's TLS certificate. Environment: `CONSUL_CACERT`. Conflicts with `ca_pem`.",
			Optional:            true,
			Validators:          []validator.String{stringvalidator.ConflictsWith(path.MatchRoot("ca_pem"))},
		},
		"ca_pem": schema.StringAttribute{
			MarkdownDescription: "PEM-encoded CA certificate. Conflicts with `ca_file`.",
			Optional:            true,
		},
		"cert_file": schema.StringAttribute{
			MarkdownDescription: "Client certificate file for mutual TLS, which an agent with `verify_incoming` on requires: without one, the error says the agent asked for it. Environment: `CONSUL_CLIENT_CERT`. Needs `key_file` or `key_pem`.",
			Optional:            true,
			Validators:          []validator.String{stringvalidator.ConflictsWith(path.MatchRoot("cert_pem"))},
		},
		"cert_pem": schema.StringAttribute{
			MarkdownDescription: "PEM-encoded client certificate. Conflicts with `cert_file`.",
			Optional:            true,
		},
		"key_file": schema.StringAttribute{
			MarkdownDescription: "Client key file for mutual TLS. Environment: `CONSUL_CLIENT_KEY`.",
			Optional:            true,
			Validators:          []validator.String{stringvalidator.ConflictsWith(path.MatchRoot("key_pem"))},
		},
		"key_pem": schema.StringAttribute{
			MarkdownDescription: "PEM-encoded client key. Conflicts with `key_file`.",
			Optional:            true,
			Sensitive:           true,
		},
		"tls_server_name": schema.StringAttribute{
			MarkdownDescription: "Server name to verify in Consul's certificate. Environment: `CONSUL_TLS_SERVER_NAME`.",
			Optional:            true,
		},
		"insecure_skip_verify": schema.BoolAttribute{
			MarkdownDescription: "Skip verification of Consul's TLS certificate. Environment: `CONSUL_HTTP_SSL_VERIFY=false`. Default `false`.",
			Optional:            true,
		},
	}
}

func (p *consullockProvider) ValidateConfig(ctx context.Context, req provider.ValidateConfigRequest, resp *provider.ValidateConfigResponse) {
	// Only the attributes checked here: the whole model cannot hold an
	// unknown retry block, which Configure reports by name.
	var cfg providerModel
	for name, dst := range map[string]*types.String{
		"cert_file": &cfg.CertFile, "cert_pem": &cfg.CertPEM, "key_file": &cfg.KeyFile, "key_pem": &cfg.KeyPEM,
	} {
		resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root(name), dst)...)
	}
	if resp.Diagnostics.HasError() {
		return
	}
	certSet := !cfg.CertFile.IsNull() || !cfg.CertPEM.IsNull()
	keySet := !cfg.KeyFile.IsNull() || !cfg.KeyPEM.IsNull()
	if certSet && !keySet && !cfg.CertFile.IsUnknown() && !cfg.CertPEM.IsUnknown() {
		resp.Diagnostics.AddAttributeError(path.Root("key_file"), "Missing Client Key",
			"cert_file or cert_pem is set without key_file or key_pem. Set the matching private key for mutual TLS.")
	}
	if keySet && !certSet && !cfg.KeyFile.IsUnknown() && !cfg.KeyPEM.IsUnknown() {
		resp.Diagnostics.AddAttributeError(path.Root("cert_file"), "Missing Client Certificate",
			"key_file or key_pem is set without cert_file or cert_pem. Set the matching certificate for mutual TLS.")
	}
}

func (p *consullockProvider) Configure(ctx context.Context, req provider.ConfigureRequest, resp *provider.ConfigureResponse) {
	// An attribute unknown until apply must not fall back to the
	// environment or a default: the plan would talk to another cluster, or
	// as another identity, than the apply.
	for _, attr := range unknownAttributes(req.Config.Raw) {
		resp.Diagnostics.AddAttributeError(attr, "Unknown Provider Setting",
			fmt.Sprintf("%s is not known until apply (it depends on a resource not created yet), so the provider cannot know which Consul "+
				"to talk to or as whom; it does not fall back to the environment or a default. Set %s to a value known at plan time, "+
				"or create what it depends on first (tofu apply -target=...).", attr, attr))
	}
	if resp.Diagnostics.HasError() {
		return
	}
	var cfg providerModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() {
		return
	}
	settings, registryPrefix := resolveSettings(ctx, cfg, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	client, err := consul.New(settings)
	if err != nil {
		resp.Diagnostics.AddError("Invalid Consul Client Configuration",
			"The provider settings (or CONSUL_* environment variables) do not make a usable client. Fix the setting named below.\n\n"+err.Error())
		return
	}
	if err := client.Ping(ctx); err != nil {
		switch consul.KindOf(err) {
		case consul.KindInvalidToken:
			resp.Diagnostics.AddAttributeError(path.Root("token"), "Invalid Consul Token",
				"Consul does not know the configured token, or it has expired. Set token, token_file or CONSUL_HTTP_TOKEN to a valid ACL token.\n\n"+err.Error())
		default:
			resp.Diagnostics.AddAttributeError(path.Root("address"), "Cannot Reach Consul",
				fmt.Sprintf("The provider could not talk to Consul at %s://%s. Check address, scheme, TLS settings and that the agent is running.\n\n%s",
					client.Scheme, client.Address, err))
		}
		return
	}
	data := &providerData{client: client, registryPrefix: registryPrefix, planned: newPlannedDeclarations()}
	resp.ResourceData = data
	resp.DataSourceData = data
	resp.EphemeralResourceData = data
}

func (p *consullockProvider) Resources(_ context.Context) []func() resource.Resource {
	return []func() resource.Resource{
		identifiedMutable(NewACLPolicyResource, "name", "The policy's name (a rename keeps the policy)."),
		identified(NewACLTokenResource, "accessor_id", "The token's accessor ID."),
		identified(NewSessionDefaultsResource, "name", "The session profile's name."),
		identified(NewLockResource, "name", "The lock's name."),
	}
}

func (p *consullockProvider) EphemeralResources(_ context.Context) []func() ephemeral.EphemeralResource {
	return []func() ephemeral.EphemeralResource{NewLockEphemeral, NewACLTokenEphemeral}
}

func (p *consullockProvider) Functions(_ context.Context) []func() function.Function {
	return []func() function.Function{NewLockRulesFunction, NewWorstCaseGapFunction, NewLockKeyFunction}
}

func (p *consullockProvider) DataSources(_ context.Context) []func() datasource.DataSource {
	return []func() datasource.DataSource{NewLockDataSource}
}

// resolveSettings applies attribute > environment > default and checks
// that referenced files are readable, naming the attribute when not.
func resolveSettings(ctx context.Context, cfg providerModel, diags *diag.Diagnostics) (consul.Settings, string) {
	env, err := consul.SettingsFromEnv()
	if err != nil {
		diags.AddError("Invalid Consul Environment Variable", err.Error()+". Fix or unset the variable.")
		return consul.Settings{}, ""
	}
	pick := func(attr types.String, fallback string) string {
		if !attr.IsNull() && !attr.IsUnknown() {
			return attr.ValueString()
		}
		return fallback
	}
	s := consul.Settings{
		Address:       pick(cfg.Address, env.Address),
		Scheme:        pick(cfg.Scheme, env.Scheme),
		Datacenter:    pick(cfg.Datacenter, env.Datacenter),
		Namespace:     pick(cfg.Namespace, env.Namespace),
		Partition:     pick(cfg.Partition, env.Partition),
		CAPEM:         pick(cfg.CAPEM, ""),
		CertPEM:       pick(cfg.CertPEM, ""),
		KeyPEM:        pick(cfg.KeyPEM, ""),
		TLSServerName: pick(cfg.TLSServerName, env.TLSServerName),
	}
	if s.Address == "" {
		s.Address = consul.DefaultAddress
	}
	// An address with its own scheme wins over CONSUL_HTTP_SSL, but not over
	// an explicit scheme attribute (a disagreement there is an error).
	if addrScheme, _, err := consul.ParseAddress(s.Address); err == nil && addrScheme != "" && cfg.Scheme.IsNull() {
		s.Scheme = addrScheme
	}
	// token and token_file: attribute pair first, then the environment pair.
	switch {
	case !cfg.Token.IsNull():
		s.Token = cfg.Token.ValueString()
	case !cfg.TokenFile.IsNull():
		s.TokenFile = cfg.TokenFile.ValueString()
	case env.TokenFile != "":
		s.TokenFile = env.TokenFile
	default:
		s.Token = env.Token
	}
	if s.TokenFile != "" {
		checkReadable(diags, "token_file", consul.EnvTokenFile, s.TokenFile)
	}
	// TLS files: attribute, then environment, unless the PEM form is set.
	if s.CAPEM == "" {
		s.CAFile = pick(cfg.CAFile, env.CAFile)
		checkReadable(diags, "ca_file", consul.EnvCACert, s.CAFile)
	}
	if s.CertPEM == "" {
		s.CertFile = pick(cfg.CertFile, env.CertFile)
		checkReadable(diags, "cert_file", consul.EnvClientCert, s.CertFile)
	}
	if s.KeyPEM == "" {
		s.KeyFile = pick(cfg.KeyFile, env.KeyFile)
		checkReadable(diags, "key_file", consul.EnvClientKey, s.KeyFile)
	}
	s.InsecureSkipVerify = env.InsecureSkipVerify
	if !cfg.InsecureSkipVerify.IsNull() {
		s.InsecureSkipVerify = cfg.InsecureSkipVerify.ValueBool()
	}
	if !cfg.Headers.IsNull() {
		headers := map[string]string{}
		diags.Append(cfg.Headers.ElementsAs(ctx, &headers, false)...)
		s.Headers = headers
	}
	if cfg.Retry != nil {
		s.Retry.MaxAttempts = int(cfg.Retry.MaxAttempts.ValueInt64())
		s.Retry.MinWait = durationOrZero(cfg.Retry.MinWait, diags)
		s.Retry.MaxWait = durationOrZero(cfg.Retry.MaxWait, diags)
		s.Retry.MaxElapsed = durationOrZero(cfg.Retry.MaxElapsed, diags)
	}
	registryPrefix := pick(cfg.RegistryPrefix, lockmodel.DefaultRegistryPrefix)
	normalized, err := lockmodel.ValidateRegistryPrefix(registryPrefix)
	if err != nil {
		diags.AddAttributeError(path.Root("registry_prefix"), "Invalid Registry Prefix", err.Error())
	}
	return s, normalized
}

// unknownAttributes returns the path of every value in the provider
// configuration that is unknown (its innermost unknown values: an unknown
// map, object or one of their elements).
func unknownAttributes(raw tftypes.Value) []path.Path {
	var out []path.Path
	_ = tftypes.Walk(raw, func(p *tftypes.AttributePath, v tftypes.Value) (bool, error) {
		if v.IsKnown() {
			return true, nil
		}
		if fp, ok := frameworkPath(p); ok {
			out = append(out, fp)
		}
		return false, nil
	})
	return out
}

// frameworkPath converts a tftypes path of attribute names and map keys,
// the only steps a provider block has, into a framework path.
func frameworkPath(p *tftypes.AttributePath) (path.Path, bool) {
	steps := p.Steps()
	if len(steps) == 0 {
		return path.Empty(), false
	}
	name, ok := steps[0].(tftypes.AttributeName)
	if !ok {
		return path.Empty(), false
	}
	out := path.Root(string(name))
	for _, step := range steps[1:] {
		switch s := step.(type) {
		case tftypes.AttributeName:
			out = out.AtName(string(s))
		case tftypes.ElementKeyString:
			out = out.AtMapKey(string(s))
		default:
			return out, true
		}
	}
	return out, true
}

func checkReadable(diags *diag.Diagnostics, attr, envVar, file string) {
	if file == "" {
		return
	}
	f, err := os.Open(file)
	if err == nil {
		_ = f.Close()
		return
	}
	diags.AddAttributeError(path.Root(attr), "Unreadable "+attrTitle(attr),
		fmt.Sprintf("%s (or %s) is %q, which cannot be read: %v. Point it at a readable file.", attr, envVar, file, err))
}

func attrTitle(attr string) string {
	switch attr {
	case "ca_file":
		return "CA File"
	case "cert_file":
		return "Certificate File"
	case "key_file":
		return "Key File"
	default:
		return "Token File"
	}
}

func durationOrZero(v timetypes.GoDuration, diags *diag.Diagnostics) time.Duration {
	if v.IsNull() || v.IsUnknown() {
		return 0
	}
	d, ds := v.ValueGoDuration()
	diags.Append(ds...)
	return d
}

// resourceConfigured reports an error when an operation that needs Consul
// runs without a configured provider.
func resourceConfigured(data *providerData, diags *diag.Diagnostics) bool {
	if data != nil {
		return true
	}
	diags.AddError("Provider Not Configured",
		"The consullock provider was not configured before this operation. This is a bug in the provider or in the calling tool; please report it.")
	return false
}

// recordKey is the key of a declaration record: where the last apply wrote
// it (stored), else where this provider writes one of kind and name.
func (d *providerData) recordKey(stored types.String, kind, name string) string {
	if key := stored.ValueString(); key != "" {
		return key
	}
	return lockmodel.RegistryKey(d.registryPrefix, kind, name)
}

// providerDataFrom unpacks what Configure handed to a resource or data
// source. It returns nil, without a diagnostic, before the provider is
// configured (the framework calls Configure early during validation).
func providerDataFrom(data any, diags *diag.Diagnostics) *providerData {
	if data == nil {
		return nil
	}
	pd, ok := data.(*providerData)
	if !ok {
		diags.AddError("Unexpected Provider Data",
			fmt.Sprintf("Expected *providerData, got %T. This is a bug in the provider; please report it.", data))
		return nil
	}
	return pd
}
