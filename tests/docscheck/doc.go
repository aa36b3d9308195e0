// Package docscheck holds tests over the repository's documentation:
// docs/, examples/, templates/ and README.md must say only what the code
// does (LockIndex is never called a fencing token), every guide must be
// reachable from the provider's index page, README.md and the published
// pages stay within their size budgets (budget_test.go, the one place the
// numbers live), and nothing a user reads is worded as a session's notes
// ("today", "main at <commit>", a load average): dated figures belong in
// reports/.
package docscheck
