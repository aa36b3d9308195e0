// Package holder is the one value for a session holding a lock: its
// session, the node the session lives on, and the fencing token of its
// acquisition. The ledger records it as a run's holder, the store names a
// live holder with it, and the holder rule (lockmodel.Holders) returns it;
// each adds only what its own use needs.
package holder

import "fmt"

// Holder is a session holding a lock. A field not known to the reader is
// empty: the holder rule knows no node, the store's live holders no token.
type Holder struct {
	// Session is the Consul session ID.
	Session string
	// Node is the node the session lives on.
	Node string
	// FencingToken is the Raft index of the acquisition (the key's
	// ModifyIndex when it was acquired): it grows from holder to holder.
	FencingToken uint64
}

// String names the holder for a message: its session, then its node and
// fencing token when known.
func (h Holder) String() string {
	s := "session " + h.Session
	if h.Node != "" {
		s += fmt.Sprintf(" on node %q", h.Node)
	}
	if h.FencingToken != 0 {
		s += fmt.Sprintf(" (fencing token %d)", h.FencingToken)
	}
	return s
}
