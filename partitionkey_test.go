package cdb

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPartitionKeyHeaderForms(t *testing.T) {
	cases := []struct {
		pk   PartitionKey
		want string
	}{
		{NewPartitionKeyString("tenant-1"), `["tenant-1"]`},
		{NewPartitionKeyString(""), `[""]`},
		{NewPartitionKeyNumber(42), `[42]`},
		{NewPartitionKeyNumber(-1.5), `[-1.5]`},
		{NewPartitionKeyBool(true), `[true]`},
		{NewPartitionKeyBool(false), `[false]`},
		{NullPartitionKey(), `[null]`},
		{NonePartitionKey(), `[{}]`},
		{NewPartitionKeyString(`a"b\c`), `["a\"b\\c"]`},
		{NewPartitionKeyString("ü"), `["\u00fc"]`},
		{NewPartitionKeyString("日本"), `["\u65e5\u672c"]`},
		{NewPartitionKeyString("😀"), `["\ud83d\ude00"]`},
		{NewPartitionKeyString("a\x01\n\x7f"), `["a\u0001\u000a\u007f"]`},
	}
	for _, tc := range cases {
		got, err := tc.pk.header("test")
		require.NoError(t, err)
		assert.Equal(t, tc.want, got)
		assert.Equal(t, tc.want, tc.pk.String())
	}
}

func TestPartitionKeyHeaderIsASCIIJSONThatRoundTrips(t *testing.T) {
	for _, s := range []string{"plain", "ü-ß", "😀🎉x", "tab\there", `q"uo\te`, "\u2028line", "<&>", "\x00nul", "𝄞 clef"} {
		h, err := NewPartitionKeyString(s).header("test")
		require.NoError(t, err)
		for i := 0; i < len(h); i++ {
			require.Less(t, h[i], byte(0x80), "header %q is not ASCII", h)
			require.GreaterOrEqual(t, h[i], byte(0x20), "header %q has a control byte", h)
		}
		var back []string
		require.NoError(t, json.Unmarshal([]byte(h), &back), h)
		assert.Equal(t, []string{s}, back)
	}
}

func TestPartitionKeySizeLimit(t *testing.T) {
	_, err := NewPartitionKeyString(strings.Repeat("a", 2048)).header("test")
	assert.NoError(t, err)
	_, err = NewPartitionKeyString(strings.Repeat("ü", 1024)).header("test") // 2048 bytes
	assert.NoError(t, err)

	_, err = NewPartitionKeyString(strings.Repeat("a", 2049)).header("CreateItem")
	require.ErrorIs(t, err, ErrPartitionKeyTooLarge)
	var ve *ValidationError
	require.ErrorAs(t, err, &ve)
	assert.Equal(t, "CreateItem", ve.Operation)
	assert.Contains(t, err.Error(), "2049 bytes, 2048 allowed (1 over)")

	_, err = NewPartitionKeyString(strings.Repeat("€", 683)).header("test") // 3 bytes each: 2049
	assert.ErrorIs(t, err, ErrPartitionKeyTooLarge)
}

func TestPartitionKeyRefusals(t *testing.T) {
	for name, pk := range map[string]PartitionKey{
		"zero":         {},
		"NaN":          NewPartitionKeyNumber(math.NaN()),
		"Inf":          NewPartitionKeyNumber(math.Inf(1)),
		"invalid utf8": NewPartitionKeyString("a\xffb"),
	} {
		_, err := pk.header("test")
		assert.ErrorIs(t, err, ErrInvalidPartitionKey, name)
	}
	assert.Equal(t, "<invalid partition key>", PartitionKey{}.String())
}

func TestOversizePartitionKeyIsRefusedBeforeSending(t *testing.T) {
	cc, st := newScriptedContainer(t, replyAlways(201, ``))
	_, err := cc.CreateItem(testCtx(t), NewPartitionKeyString(strings.Repeat("k", 3000)), []byte(`{"id":"a"}`), nil)
	assert.ErrorIs(t, err, ErrPartitionKeyTooLarge)
	_, err = cc.ReadItem(testCtx(t), PartitionKey{}, "a", nil)
	assert.ErrorIs(t, err, ErrInvalidPartitionKey)
	b := cc.NewTransactionalBatch(NewPartitionKeyString(strings.Repeat("k", 3000)))
	b.ReadItem("a", nil)
	_, err = cc.ExecuteTransactionalBatch(testCtx(t), b, nil)
	assert.ErrorIs(t, err, ErrPartitionKeyTooLarge)
	assert.Equal(t, 0, st.count())
	assert.False(t, IsRetryable(ToProviderError("x", err)))
}
