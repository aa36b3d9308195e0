package consul

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxBodyPeek bounds how much of an error body the retry policy reads.
const maxBodyPeek = 4096

type startKey struct{}

// withStart records when the first attempt of a request began, so the retry
// policy can bound the total time and not only the number of attempts.
func withStart(ctx context.Context) context.Context {
	if _, ok := ctx.Value(startKey{}).(time.Time); ok {
		return ctx
	}
	return context.WithValue(ctx, startKey{}, time.Now())
}

// retryPolicy returns a go-retryablehttp CheckRetry that retries what is
// transient for Consul and nothing else.
func retryPolicy(r RetrySettings) func(ctx context.Context, resp *http.Response, err error) (bool, error) {
	return func(ctx context.Context, resp *http.Response, err error) (bool, error) {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return false, ctxErr
		}
		if start, ok := ctx.Value(startKey{}).(time.Time); ok && time.Since(start) >= r.MaxElapsed {
			return false, err
		}
		// A request that is not safe to send twice is retried only when
		// Consul cannot have applied it (see replay.go).
		safe := replaySafeFrom(ctx)
		if err != nil {
			// Connection errors: refused, reset, timeouts. A context
			// cancellation was handled above; TLS and URL errors are not
			// transient, so do not retry them.
			return isTransientTransportError(err) && (safe || notSent(err)), err
		}
		return shouldRetryStatus(resp) && (safe || notApplied(resp)), nil
	}
}

func isTransientTransportError(err error) bool {
	msg := err.Error()
	for _, permanent := range []string{
		"x509:", "tls:", "unsupported protocol scheme", "invalid URL", "no such host",
		"server gave HTTP response to HTTPS client", "first record does not look like a TLS handshake",
	} {
		if strings.Contains(msg, permanent) {
			return false
		}
	}
	return true
}

// shouldRetryStatus decides from the status code, and for 500 from the body.
func shouldRetryStatus(resp *http.Response) bool {
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	case http.StatusInternalServerError:
		return isTransientServerError(peekBody(resp))
	default:
		return false
	}
}

// peekBody reads the start of the body and puts it back for the caller.
func peekBody(resp *http.Response) string {
	if resp.Body == nil {
		return ""
	}
	head, _ := io.ReadAll(io.LimitReader(resp.Body, maxBodyPeek))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), resp.Body), resp.Body}
	return string(head)
}

// backoff is exponential with jitter (between half and all of the step), and
// honours Retry-After on 429/503 up to max.
func backoff(minWait, maxWait time.Duration, attempt int, resp *http.Response) time.Duration {
	if resp != nil && (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable) {
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
			return min(time.Duration(s)*time.Second, maxWait)
		}
	}
	return Jitter(Backoff(minWait, maxWait, attempt+1))
}
