package provider

import (
	"context"
	"strings"

	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
)

// QuietServer wraps the framework's protocol server for a process in which
// nobody asked for provider or SDK logs. It hands each per-resource request
// to the framework with a context that keeps the request's cancellation but
// none of its values, which are only the SDKs' loggers.
//
// Why: the framework keeps the cancel function of every request's context
// until the CLI stops the provider (proto6server registerContext, so that
// StopProvider can cancel requests in flight), and with it the whole
// context chain: the loggers the SDKs build for each request. A plan of
// 2,000 locks then holds over 100 MB of loggers that log nothing, and the
// garbage collector scans them again and again. With QuietServer each
// request leaves two small contexts behind.
//
// Only calls that end with their request are wrapped: an ephemeral
// resource's Open, Renew and Close, the provider's configuration and
// everything else pass through unchanged.
func QuietServer(inner tfprotov6.ProviderServer) tfprotov6.ProviderServer {
	return quietServer{inner}
}

type quietServer struct{ tfprotov6.ProviderServer }

var _ tfprotov6.ProviderServer = quietServer{}

// detached serves one request with a context that has none of ctx's values
// and is cancelled with ctx, and releases that context when it is done.
func detached[Req, Resp any](ctx context.Context, req Req, serve func(context.Context, Req) (Resp, error)) (Resp, error) {
	out, cancel := context.WithCancel(context.Background())
	stop := context.AfterFunc(ctx, cancel)
	defer func() { stop(); cancel() }()
	return serve(out, req)
}

func (s quietServer) ValidateResourceConfig(ctx context.Context, req *tfprotov6.ValidateResourceConfigRequest) (*tfprotov6.ValidateResourceConfigResponse, error) {
	return detached(ctx, req, s.ProviderServer.ValidateResourceConfig)
}

func (s quietServer) UpgradeResourceState(ctx context.Context, req *tfprotov6.UpgradeResourceStateRequest) (*tfprotov6.UpgradeResourceStateResponse, error) {
	return detached(ctx, req, s.ProviderServer.UpgradeResourceState)
}

func (s quietServer) UpgradeResourceIdentity(ctx context.Context, req *tfprotov6.UpgradeResourceIdentityRequest) (*tfprotov6.UpgradeResourceIdentityResponse, error) {
	return detached(ctx, req, s.ProviderServer.UpgradeResourceIdentity)
}

func (s quietServer) ReadResource(ctx context.Context, req *tfprotov6.ReadResourceRequest) (*tfprotov6.ReadResourceResponse, error) {
	return detached(ctx, req, s.ProviderServer.ReadResource)
}

func (s quietServer) PlanResourceChange(ctx context.Context, req *tfprotov6.PlanResourceChangeRequest) (*tfprotov6.PlanResourceChangeResponse, error) {
	return detached(ctx, req, s.ProviderServer.PlanResourceChange)
}

func (s quietServer) ApplyResourceChange(ctx context.Context, req *tfprotov6.ApplyResourceChangeRequest) (*tfprotov6.ApplyResourceChangeResponse, error) {
	return detached(ctx, req, s.ProviderServer.ApplyResourceChange)
}

func (s quietServer) ValidateDataResourceConfig(ctx context.Context, req *tfprotov6.ValidateDataResourceConfigRequest) (*tfprotov6.ValidateDataResourceConfigResponse, error) {
	return detached(ctx, req, s.ProviderServer.ValidateDataResourceConfig)
}

func (s quietServer) ReadDataSource(ctx context.Context, req *tfprotov6.ReadDataSourceRequest) (*tfprotov6.ReadDataSourceResponse, error) {
	return detached(ctx, req, s.ProviderServer.ReadDataSource)
}

// ProviderLogEnv is the provider's own log level variable, derived by
// terraform-plugin-go from the provider address.
const ProviderLogEnv = "TF_LOG_PROVIDER_CONSULLOCK"

// QuietLogEnv returns the log level variables to set to OFF before serving.
// Unless told otherwise by the environment, the plugin SDKs log every RPC at
// trace level, JSON-encoded to stderr, and the CLI throws it all away when
// the user did not set TF_LOG: a third of the provider's CPU during a plan.
// When the user asked for any provider or SDK log, nothing is changed, so
// everything is logged as before.
func QuietLogEnv(environ []string) []string {
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		if value == "" || name == "TF_LOG_PATH" || name == "TF_LOG_SDK_PROTO_DATA_DIR" || name == "TF_LOG_CORE" {
			continue
		}
		if name == "TF_LOG" || strings.HasPrefix(name, "TF_LOG_PROVIDER") || strings.HasPrefix(name, "TF_LOG_SDK") {
			return nil
		}
	}
	return []string{"TF_LOG_SDK", "TF_LOG_SDK_PROTO", "TF_LOG_SDK_FRAMEWORK", "TF_LOG_PROVIDER", ProviderLogEnv}
}
