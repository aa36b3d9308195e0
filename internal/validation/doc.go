// Package validation holds how consullock's pure rules report a bad input:
// FieldError (the attribute as users write it, the value, what is allowed),
// FieldErrors (every problem of one declaration), and Warning (advice that
// does not block a plan). The provider maps them to attribute diagnostics;
// the controller and the runner print them.
//
// It sits below every rule package (lockmodel, ledger, aclrules) so that
// each can report in the same terms without importing another.
package validation
