package sim

import (
	"fmt"
	"strconv"
	"strings"

	rt "github.com/duroxide-go/cdb/durable"
)

// Large values (Features.LargeValues) and turns the provider refuses
// (Features.RefusedTurns). The large values are built inside the
// orchestration from small specs, so the start's input stays small.
const (
	kindBigKV  = "BigKV"  // Batch keys of Size bytes per turn, over N turns
	kindBigOut = "BigOut" // one activity, then an output of Size bytes
)

// bigKVKey is the j-th key a BigKV sets in turn i; its value names both.
func bigKVKey(i, j, batch int) string { return "b" + strconv.Itoa(i*batch+j) }

func bigKVValue(key string, size int) string {
	return key + ":" + strings.Repeat("v", max(size-len(key)-1, 0))
}

// bigKVFinal is the store a BigKV ends with.
func bigKVFinal(s spec) map[string]string {
	m := map[string]string{}
	for i := range s.N {
		for j := range s.Batch {
			key := bigKVKey(i, j, s.Batch)
			m[key] = bigKVValue(key, s.Size)
		}
	}
	return m
}

func orchBigKV(ctx *rt.OrchestrationContext, input string) (string, error) {
	s, err := decodeSpec(input)
	if err != nil {
		return "", err
	}
	for i := range s.N {
		for j := range s.Batch {
			key := bigKVKey(i, j, s.Batch)
			ctx.SetKV(key, bigKVValue(key, s.Size))
		}
		if _, err := (spec{Run: s.Run}).work(ctx, i).Await(); err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("bigkv:%dx%d", s.N*s.Batch, s.Size), nil
}

// bigOutput is the output of a BigOut of size bytes.
func bigOutput(run string, size int) string {
	return "big:" + run + ":" + strings.Repeat("o", size)
}

func orchBigOut(ctx *rt.OrchestrationContext, input string) (string, error) {
	s, err := decodeSpec(input)
	if err != nil {
		return "", err
	}
	if _, err := (spec{Run: s.Run}).work(ctx, 0).Await(); err != nil {
		return "", err
	}
	return bigOutput(s.Run, s.Size), nil
}

// refusedSize is an activity input larger than a Cosmos DB document: the
// turn that schedules it is one the provider refuses.
const refusedSize = 2*1024*1024 + 100*1024
