package ledger_test

import (
	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

// The rules' tests round-trip the ledgers they produce through the record
// codec (codec_test.go).
func init() {
	ledger.SetCodec(lockmodel.EncodeLedger, lockmodel.DecodeLedger)
}
