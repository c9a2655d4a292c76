package cdb

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/duroxide-go/cdb/internal/epk"
)

// MaxPartitionKeyValueBytes is the largest string partition key value the
// service accepts, in UTF-8 bytes (2 KB, the large partition key limit).
const MaxPartitionKeyValueBytes = 2048

type pkKind uint8

const (
	pkUnset pkKind = iota // the zero PartitionKey: refused, so a forgotten key never reaches the wire
	pkString
	pkNumber
	pkBool
	pkNull
	pkNone
)

// PartitionKey is the logical partition key value of an item: a string, a
// number, a boolean, JSON null, or "none" (the document has no value at the
// partition key path). Build it with the constructors; the zero value is
// refused by every operation.
type PartitionKey struct {
	kind pkKind
	s    string
	f    float64
	b    bool
}

// NewPartitionKeyString is a string partition key value.
func NewPartitionKeyString(s string) PartitionKey { return PartitionKey{kind: pkString, s: s} }

// NewPartitionKeyNumber is a numeric partition key value.
func NewPartitionKeyNumber(f float64) PartitionKey { return PartitionKey{kind: pkNumber, f: f} }

// NewPartitionKeyBool is a boolean partition key value.
func NewPartitionKeyBool(b bool) PartitionKey { return PartitionKey{kind: pkBool, b: b} }

// NullPartitionKey addresses documents whose partition key is JSON null.
func NullPartitionKey() PartitionKey { return PartitionKey{kind: pkNull} }

// NonePartitionKey addresses documents that have no partition key property.
func NonePartitionKey() PartitionKey { return PartitionKey{kind: pkNone} }

// String returns the header form, e.g. ["tenant-1"], or a marker for an
// unusable key. Meant for logs and messages.
func (pk PartitionKey) String() string {
	h, err := pk.header("PartitionKey")
	if err != nil {
		return "<invalid partition key>"
	}
	return h
}

// header renders the x-ms-documentdb-partitionkey value,
// refusing what the service would refuse.
func (pk PartitionKey) header(op string) (string, error) {
	switch pk.kind {
	case pkString:
		if err := validatePartitionKeyString(op, pk.s); err != nil {
			return "", err
		}
		return "[" + quoteJSONASCII(pk.s) + "]", nil
	case pkNumber:
		if math.IsNaN(pk.f) || math.IsInf(pk.f, 0) {
			return "", invalid(op, "partition key", ErrInvalidPartitionKey, "number %v has no JSON form", pk.f)
		}
		b, err := json.Marshal(pk.f)
		if err != nil {
			return "", invalid(op, "partition key", ErrInvalidPartitionKey, "number %v: %v", pk.f, err)
		}
		return "[" + string(b) + "]", nil
	case pkBool:
		return "[" + strconv.FormatBool(pk.b) + "]", nil
	case pkNull:
		return "[null]", nil
	case pkNone:
		return "[{}]", nil
	}
	return "", invalid(op, "partition key", ErrInvalidPartitionKey,
		"zero PartitionKey; build one with NewPartitionKeyString or its siblings")
}

// epkValue is the value the service hashes into the effective partition
// key: what the header names, as internal/epk takes it.
func (pk PartitionKey) epkValue() any {
	switch pk.kind {
	case pkString:
		return pk.s
	case pkNumber:
		return pk.f
	case pkBool:
		return pk.b
	case pkNull:
		return nil
	}
	return epk.Undefined{}
}

func validatePartitionKeyString(op, s string) error {
	if len(s) > MaxPartitionKeyValueBytes {
		return invalid(op, "partition key", ErrPartitionKeyTooLarge,
			"value is %d bytes, %d allowed (%d over)", len(s), MaxPartitionKeyValueBytes, len(s)-MaxPartitionKeyValueBytes)
	}
	if !utf8.ValidString(s) {
		// The document body would carry U+FFFD where the header carries the
		// raw bytes, so the two could never match.
		return invalid(op, "partition key", ErrInvalidPartitionKey, "value is not valid UTF-8")
	}
	return nil
}

// quoteJSONASCII quotes s as a JSON string using only ASCII: headers must be
// ASCII, so every non-ASCII character becomes \uXXXX (a surrogate pair above
// the Basic Multilingual Plane). strconv.QuoteToASCII, which the Go SDK uses,
// writes Go escapes (\x01, \U0001F600) that are not JSON; this does not.
func quoteJSONASCII(s string) string {
	const hex = "0123456789abcdef"
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	u4 := func(r rune) {
		b.WriteString(`\u`)
		b.WriteByte(hex[r>>12&0xf])
		b.WriteByte(hex[r>>8&0xf])
		b.WriteByte(hex[r>>4&0xf])
		b.WriteByte(hex[r&0xf])
	}
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r < 0x20 || r == 0x7f:
			u4(r)
		case r < utf8.RuneSelf:
			b.WriteByte(byte(r))
		case r > 0xffff:
			r -= 0x10000
			u4(0xd800 + (r>>10)&0x3ff)
			u4(0xdc00 + r&0x3ff)
		default:
			u4(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// wholePartitionRead are the options of a query that reads every matching
// document of pk's partition: its pages hold what fits the service's page
// size (4 MB) rather than 100 documents, so an instance of many documents
// (a long history: one per turn) is read in a round trip per 4 MB.
func wholePartitionRead(pk string) *QueryOptions {
	key := NewPartitionKeyString(pk)
	return &QueryOptions{PartitionKey: &key, MaxItemCount: -1}
}
