package consul

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func response(code int, body string) *http.Response {
	return &http.Response{StatusCode: code, Body: io.NopCloser(strings.NewReader(body)), Header: http.Header{}}
}

func TestRetryPolicy(t *testing.T) {
	policy := retryPolicy(DefaultRetry)
	ctx := withStart(context.Background())
	tests := []struct {
		name  string
		resp  *http.Response
		err   error
		retry bool
	}{
		{"connection refused", nil, errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), true},
		{"tls failure", nil, errors.New("tls: failed to verify certificate: x509: unknown authority"), false},
		{"429", response(429, "rate limited"), nil, true},
		{"502", response(502, ""), nil, true},
		{"503", response(503, ""), nil, true},
		{"504", response(504, ""), nil, true},
		{"no leader 500", response(500, "No cluster leader"), nil, true},
		{"invalid session ttl 500", response(500, "Invalid Session TTL '5000000000', must be between [10s=24h0m0s]"), nil, false},
		{"missing node 500", response(500, "Missing node registration"), nil, false},
		{"400", response(400, "Request decode failed"), nil, false},
		{"403", response(403, "Permission denied"), nil, false},
		{"404", response(404, ""), nil, false},
		{"200", response(200, "true"), nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := policy(ctx, tt.resp, tt.err)
			if got != tt.retry {
				t.Fatalf("retry = %v, want %v", got, tt.retry)
			}
			if tt.resp != nil {
				// The body must still be readable by the caller.
				b, _ := io.ReadAll(tt.resp.Body)
				if tt.resp.StatusCode == 500 && len(b) == 0 {
					t.Fatal("retry policy consumed the response body")
				}
			}
		})
	}
}

func TestRetryPolicyStopsAfterMaxElapsed(t *testing.T) {
	policy := retryPolicy(RetrySettings{MaxAttempts: 100, MinWait: time.Millisecond, MaxWait: time.Millisecond, MaxElapsed: time.Millisecond})
	ctx := context.WithValue(context.Background(), startKey{}, time.Now().Add(-time.Second))
	if retry, _ := policy(ctx, response(503, ""), nil); retry {
		t.Fatal("retried after max_elapsed")
	}
}

func TestBackoffIsBoundedAndJittered(t *testing.T) {
	minWait, maxWait := 100*time.Millisecond, time.Second
	seen := map[time.Duration]bool{}
	for attempt := range 10 {
		for range 20 {
			d := backoff(minWait, maxWait, attempt, nil)
			if d <= 0 || d > maxWait {
				t.Fatalf("attempt %d: backoff %v outside (0, %v]", attempt, d, maxWait)
			}
			seen[d] = true
		}
	}
	if len(seen) < 10 {
		t.Fatalf("backoff shows no jitter: %d distinct values", len(seen))
	}
	resp := response(429, "")
	resp.Header.Set("Retry-After", "2")
	if d := backoff(minWait, 5*time.Second, 0, resp); d != 2*time.Second {
		t.Fatalf("Retry-After not honoured: %v", d)
	}
}
