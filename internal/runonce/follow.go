package runonce

import (
	"context"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/store"
)

// Follow waits for the run's end without a session: it follows the ledger
// with blocking queries (consul.FollowKey), the first waiting for a change
// after index from (its ModifyIndex as read; 0: none), until ctx ends or
// handle returns false. handle sees every answer that may have changed:
// the ledger decoded (store.DecodeLedgerPair; err when it does not, which
// a caller leaves to the holder to report), its ModifyIndex (0 when
// absent) and the answer's X-Consul-Index. A failed read is logged and
// tried again after the Follower's back-off.
func (r Run) Follow(ctx context.Context, from uint64, handle func(l ledger.Ledger, index, asOf uint64, err error) bool) {
	consul.FollowKey(ctx, r.Client, r.Key, "the run ledger", from, r.log(), func(pair *api.KVPair, asOf uint64) bool {
		l, index, err := store.DecodeLedgerPair(r.Key, r.Lock, pair)
		return handle(l, index, asOf, err)
	})
}
