// Package epk computes the service's effective partition key (EPK) of a
// single-path Hash partition key, in partition key version 1 or 2. The
// client resolves the range a point operation reads from it (to send that
// range's session token only), and the fake places every key in the range
// the SDKs pick; both must agree with the service, so both use this.
package epk

import (
	"encoding/binary"
	"encoding/hex"
	"math"
	"math/bits"
	"strings"
	"unicode/utf16"
)

// How the service computes it:
//
//   - Version 2: MurmurHash3 x64 128-bit (seed 0) over the key's binary
//     encoding, its 16 bytes reversed and the top two bits cleared: 32 hex
//     digits, all below "4000...".
//   - Version 1: MurmurHash3 x86 32-bit over the key's (truncated) binary
//     encoding; the EPK is the order-preserving number encoding of the hash
//     followed by the order-preserving encoding of the (truncated) value.
//
// Partition key ranges compare EPKs as strings, so a key's range is the one
// whose [minInclusive, maxExclusive) holds its EPK.

// Type-prefix bytes of the service's binary encoding of JSON values.
const (
	prefixUndefined byte = 0x00 // "none": the document has no key property
	prefixNull      byte = 0x01
	prefixFalse     byte = 0x02
	prefixTrue      byte = 0x03
	prefixNumber    byte = 0x05
	prefixString    byte = 0x08
	prefixInfinity  byte = 0xFF // ends a string in the V2 hashing encoding
)

// v1MaxStringChars is how much of a string V1 hashes and encodes, in UTF-16
// code units as the SDKs count characters.
const v1MaxStringChars = 100

// Undefined is the value of the "none" partition key (no property at the
// path, header `[{}]`); the SDKs hash it as undefined.
type Undefined struct{}

// Hash is the service's EPK of a partition key value in a container of the
// given partition key version (2, or 1 for any other), as upper-case hex.
// A value is a string, a float64, a bool, nil (JSON null) or Undefined.
func Hash(v any, version int) string {
	var epk []byte
	if version == 2 {
		epk = V2(v)
	} else {
		epk = v1(v)
	}
	return strings.ToUpper(hex.EncodeToString(epk))
}

// V2 is the version 2 EPK of v, as bytes.
func V2(v any) []byte {
	h1, h2 := murmur3x64x128(hashingEncoding(v, prefixInfinity))
	epk := make([]byte, 16)
	// The 16 hash bytes (h1, h2 little-endian) reversed: h2 then h1, big-endian.
	binary.BigEndian.PutUint64(epk[:8], h2)
	binary.BigEndian.PutUint64(epk[8:], h1)
	epk[0] &= 0x3F
	return epk
}

func v1(v any) []byte {
	v = truncateV1(v)
	return append(EncodeNumber(float64(V1Hash(v))), encodeValue(v)...)
}

// V1Hash is the 32-bit hash that leads v's version 1 EPK.
func V1Hash(v any) uint32 {
	return murmur3x86x32(hashingEncoding(truncateV1(v), prefixUndefined))
}

// truncateV1 cuts strings to their first 100 UTF-16 code units; a surrogate
// pair cut in half leaves U+FFFD, as a UTF-8 encoder writes a lone surrogate.
func truncateV1(v any) any {
	s, ok := v.(string)
	if !ok {
		return v
	}
	units := utf16.Encode([]rune(s))
	if len(units) <= v1MaxStringChars {
		return s
	}
	return string(utf16.Decode(units[:v1MaxStringChars]))
}

// hashingEncoding is the byte form the hash runs over: the type prefix,
// then a number's IEEE 754 bits little-endian or a string's UTF-8 bytes
// followed by stringEnd (V1 and V2 differ there).
func hashingEncoding(v any, stringEnd byte) []byte {
	switch x := v.(type) {
	case string:
		out := append([]byte{prefixString}, x...)
		return append(out, stringEnd)
	case float64:
		out := []byte{prefixNumber}
		return binary.LittleEndian.AppendUint64(out, math.Float64bits(x))
	}
	return []byte{literalPrefix(v)}
}

// literalPrefix is the one-byte encoding of true, false, null and none.
func literalPrefix(v any) byte {
	switch x := v.(type) {
	case bool:
		if x {
			return prefixTrue
		}
		return prefixFalse
	case nil:
		return prefixNull
	}
	return prefixUndefined
}

// encodeValue is the order-preserving binary encoding V1 EPKs carry.
func encodeValue(v any) []byte {
	switch x := v.(type) {
	case string:
		return encodeString(x)
	case float64:
		return EncodeNumber(x)
	}
	return []byte{literalPrefix(v)}
}

// encodeString writes the string prefix, every UTF-8 byte plus one (so no
// byte is 0x00, the terminator), then 0x00. Only V1 uses it, on strings
// already truncated to 100 code units, which the service treats as short.
func encodeString(s string) []byte {
	out := make([]byte, 0, len(s)+2)
	out = append(out, prefixString)
	for i := 0; i < len(s); i++ {
		b := s[i]
		if b < 0xFF {
			b++
		}
		out = append(out, b)
	}
	return append(out, prefixUndefined)
}

// EncodeNumber writes the number prefix and an order-preserving form of the
// double: its bits mapped to an unsigned integer that sorts as the numbers
// do, written as the top byte, then 7 bits a byte, high bits first, each
// byte's low bit set when more follow. Trailing zero bits are not written.
func EncodeNumber(f float64) []byte {
	payload := orderedBits(f)
	out := []byte{prefixNumber, byte(payload >> 56)}
	payload <<= 8
	for payload != 0 {
		chunk := byte(payload >> 56)
		payload <<= 7
		if payload != 0 {
			out = append(out, chunk|1)
		} else if last := chunk & 0xFE; last != 0 {
			out = append(out, last)
		}
	}
	return out
}

// orderedBits maps a double to a uint64 that sorts as the doubles do:
// positives get the sign bit set, negatives are negated (two's complement).
func orderedBits(f float64) uint64 {
	raw := math.Float64bits(f)
	if raw < 1<<63 {
		return raw ^ 1<<63
	}
	return -raw
}

// murmur3x86x32 is MurmurHash3's x86 32-bit variant with seed 0.
func murmur3x86x32(data []byte) uint32 {
	const c1, c2 = 0xcc9e2d51, 0x1b873593
	var h uint32
	n := len(data) / 4 * 4
	for i := 0; i < n; i += 4 {
		h ^= mixK32(binary.LittleEndian.Uint32(data[i:]), c1, c2)
		h = bits.RotateLeft32(h, 13)*5 + 0xe6546b64
	}
	var k uint32
	for i := len(data) - 1; i >= n; i-- {
		k = k<<8 | uint32(data[i])
	}
	if len(data) > n {
		h ^= mixK32(k, c1, c2)
	}
	h ^= uint32(len(data))
	return fmix32(h)
}

func mixK32(k, c1, c2 uint32) uint32 {
	return bits.RotateLeft32(k*c1, 15) * c2
}

func fmix32(h uint32) uint32 {
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	return h ^ h>>16
}

// murmur3x64x128 is MurmurHash3's x64 128-bit variant with seed 0.
func murmur3x64x128(data []byte) (h1, h2 uint64) {
	const c1, c2 = 0x87c37b91114253d5, 0x4cf5ad432745937f
	n := len(data) / 16 * 16
	for i := 0; i < n; i += 16 {
		k1 := binary.LittleEndian.Uint64(data[i:])
		k2 := binary.LittleEndian.Uint64(data[i+8:])
		h1 ^= bits.RotateLeft64(k1*c1, 31) * c2
		h1 = bits.RotateLeft64(h1, 27) + h2
		h1 = h1*5 + 0x52dce729
		h2 ^= bits.RotateLeft64(k2*c2, 33) * c1
		h2 = bits.RotateLeft64(h2, 31) + h1
		h2 = h2*5 + 0x38495ab5
	}
	var k1, k2 uint64
	tail := data[n:]
	for i := len(tail) - 1; i >= 8; i-- {
		k2 = k2<<8 | uint64(tail[i])
	}
	for i := min(len(tail), 8) - 1; i >= 0; i-- {
		k1 = k1<<8 | uint64(tail[i])
	}
	if len(tail) > 8 {
		h2 ^= bits.RotateLeft64(k2*c2, 33) * c1
	}
	if len(tail) > 0 {
		h1 ^= bits.RotateLeft64(k1*c1, 31) * c2
	}
	h1 ^= uint64(len(data))
	h2 ^= uint64(len(data))
	h1 += h2
	h2 += h1
	h1, h2 = fmix64(h1), fmix64(h2)
	h1 += h2
	h2 += h1
	return h1, h2
}

func fmix64(k uint64) uint64 {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	k *= 0xc4ceb9fe1a85ec53
	return k ^ k>>33
}
