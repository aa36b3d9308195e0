package testenv

import "net/http"

// StatusRecorder is an http.ResponseWriter that remembers the status code
// written through it, for a test's proxy that counts Consul's answers. A
// body written without a status is 200, as net/http sends it. It passes
// Flush on, so that a blocking query's answer is not held back.
type StatusRecorder struct {
	http.ResponseWriter
	Status int
}

func (r *StatusRecorder) WriteHeader(code int) {
	r.Status = code
	r.ResponseWriter.WriteHeader(code)
}

func (r *StatusRecorder) Write(b []byte) (int, error) {
	if r.Status == 0 {
		r.Status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (r *StatusRecorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
