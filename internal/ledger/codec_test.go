package ledger

import (
	"bytes"
	"encoding/json"
)

// The ledger's record codec (EncodeLedger, DecodeLedger) is package
// record's, with the other registry records, and record imports this
// package: the rules' tests reach it through these, which record_test.go
// (package ledger_test) sets, so that every ledger the rules produce is
// checked to encode and decode to itself.
var (
	encodeLedger func(Ledger) ([]byte, error)
	decodeLedger func([]byte) (Ledger, error)
)

// SetCodec is for record_test.go only.
func SetCodec(encode func(Ledger) ([]byte, error), decode func([]byte) (Ledger, error)) {
	encodeLedger, decodeLedger = encode, decode
}

// marshalJSON is how a record writes a string: JSON without HTML escaping.
func marshalJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	err := enc.Encode(v)
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), err
}
