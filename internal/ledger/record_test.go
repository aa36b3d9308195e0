package ledger_test

import (
	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/record"
)

// The rules' tests round-trip the ledgers they produce through the record
// codec (codec_test.go).
func init() {
	ledger.SetCodec(record.EncodeLedger, record.DecodeLedger)
}
