package provider

import (
	"context"
	"runtime"
	"slices"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
)

type ballastKey struct{}

// The framework keeps every request's context until the provider is
// stopped; QuietServer hands it contexts that hold nothing of the request.
// Each request here carries 1 MiB in its context, as the SDKs' loggers are
// carried in a real one.
func TestQuietServer_requestContextsAreNotKept(t *testing.T) {
	const calls, ballast = 40, 1 << 20
	retained := func(server tfprotov6.ProviderServer) int64 {
		before := heapAlloc()
		for range calls {
			ctx, cancel := context.WithCancel(context.WithValue(context.Background(), ballastKey{}, make([]byte, ballast)))
			_, _ = server.UpgradeResourceState(ctx, &tfprotov6.UpgradeResourceStateRequest{TypeName: "consullock_lock"})
			cancel() // gRPC ends a request's context with the request
		}
		kept := heapAlloc() - before
		runtime.KeepAlive(server) // a serving provider lives on
		return kept
	}
	framework := providerserver.NewProtocol6(New("test")())
	if kept := retained(framework()); kept < calls*ballast/2 {
		t.Fatalf("the framework alone kept %d bytes of %d requests' contexts; if it no longer keeps them, QuietServer can go", kept, calls)
	}
	if kept := retained(QuietServer(framework())); kept > calls*ballast/10 {
		t.Fatalf("through QuietServer %d bytes of %d requests' contexts were kept, want almost none", kept, calls)
	}
}

func heapAlloc() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// recordingServer records the context each call was given.
type recordingServer struct {
	tfprotov6.ProviderServer
	got chan context.Context
}

func (s recordingServer) ReadResource(ctx context.Context, _ *tfprotov6.ReadResourceRequest) (*tfprotov6.ReadResourceResponse, error) {
	s.got <- ctx
	<-ctx.Done() // as a request would when the CLI cancels it
	return &tfprotov6.ReadResourceResponse{}, nil
}

// A request cancelled by the CLI is cancelled for the framework too, and
// the framework's context holds none of the request's values.
func TestQuietServer_keepsCancellationDropsValues(t *testing.T) {
	rec := recordingServer{got: make(chan context.Context, 1)}
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), ballastKey{}, "request value"))
	returned := make(chan struct{})
	go func() {
		_, _ = QuietServer(rec).ReadResource(ctx, &tfprotov6.ReadResourceRequest{})
		close(returned)
	}()
	inner := <-rec.got
	if v := inner.Value(ballastKey{}); v != nil {
		t.Errorf("the framework's context carries the request's value %v", v)
	}
	cancel()
	<-returned // hangs (test timeout) unless the cancellation reached the framework
	if inner.Err() == nil {
		t.Error("the framework's context is still live after the request was cancelled")
	}
}

func TestQuietLogEnv(t *testing.T) {
	quiet := []string{"TF_LOG_SDK", "TF_LOG_SDK_PROTO", "TF_LOG_SDK_FRAMEWORK", "TF_LOG_PROVIDER", ProviderLogEnv}
	for _, tc := range []struct {
		name    string
		environ []string
		want    []string
	}{
		{"nothing asked", []string{"HOME=/root", "PATH=/bin"}, quiet},
		{"empty TF_LOG is not asking", []string{"TF_LOG="}, quiet},
		{"log path alone logs nothing", []string{"TF_LOG_PATH=/tmp/x"}, quiet},
		{"core logs only", []string{"TF_LOG_CORE=trace"}, quiet},
		{"TF_LOG", []string{"TF_LOG=trace"}, nil},
		{"TF_LOG json", []string{"TF_LOG=JSON"}, nil},
		{"provider logs", []string{"TF_LOG_PROVIDER=debug"}, nil},
		{"this provider's logs", []string{"TF_LOG_PROVIDER_CONSULLOCK=trace"}, nil},
		{"SDK logs", []string{"TF_LOG_SDK=trace"}, nil},
		{"framework logs", []string{"TF_LOG_SDK_FRAMEWORK=trace"}, nil},
		{"protocol logs", []string{"TF_LOG_SDK_PROTO=trace"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := QuietLogEnv(tc.environ); !slices.Equal(got, tc.want) {
				t.Fatalf("QuietLogEnv(%q) = %q, want %q", tc.environ, got, tc.want)
			}
		})
	}
}
