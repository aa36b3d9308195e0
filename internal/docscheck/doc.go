// Package docscheck holds tests over the repository's documentation:
// docs/, examples/, templates/ and README.md must say only what the code
// does (LockIndex is never called a fencing token) and every guide must
// be reachable from the provider's index page.
package docscheck
