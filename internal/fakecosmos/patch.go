package fakecosmos

import (
	"encoding/json"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/duroxide-go/cdb/internal/cosmossql"
)

// maxPatchOperations is the service's limit per patch (also inside a batch).
const maxPatchOperations = 10

// patchSpec is a parsed patch request.
type patchSpec struct {
	condition string // "from c where ...", or ""
	ops       []patchOp
}

type patchOp struct {
	op    string
	path  []string
	from  []string // move only
	value any
	raw   string // the path as sent, for messages
}

// parsePatchBody accepts {"operations":[...],"condition":"..."} and, as the
// service does, a bare array of operations.
func parsePatchBody(body []byte) (patchSpec, error) {
	v, err := decodeJSON(body)
	if err != nil {
		return patchSpec{}, err
	}
	return parsePatchValue(v)
}

func parsePatchValue(v any) (patchSpec, error) {
	var spec patchSpec
	var list []any
	switch x := v.(type) {
	case []any:
		list = x
	case map[string]any:
		ops, ok := x["operations"].([]any)
		if !ok {
			return spec, badRequest("The patch body must have an \"operations\" array.")
		}
		list = ops
		if cond, present := x["condition"]; present && cond != nil {
			s, ok := cond.(string)
			if !ok {
				return spec, badRequest("The patch condition must be a string like \"from c where ...\".")
			}
			spec.condition = s
		}
	default:
		return spec, badRequest("The patch body must be a JSON object or an array of operations.")
	}
	if len(list) == 0 {
		return spec, badRequest("A patch must have at least one operation.")
	}
	if len(list) > maxPatchOperations {
		return spec, badRequest("The number of patch operations can't exceed %d, got %d.", maxPatchOperations, len(list))
	}
	for i, item := range list {
		op, err := parsePatchOp(i, item)
		if err != nil {
			return spec, err
		}
		spec.ops = append(spec.ops, op)
	}
	return spec, nil
}

func parsePatchOp(i int, item any) (patchOp, error) {
	obj, ok := item.(map[string]any)
	if !ok {
		return patchOp{}, badRequest("Patch operation %d must be a JSON object.", i)
	}
	name, _ := obj["op"].(string)
	name = strings.ToLower(name)
	switch name {
	case "add", "set", "replace", "remove", "incr", "move":
	default:
		return patchOp{}, badRequest("Patch operation %d has an unknown op %q (add, set, replace, remove, incr, move).", i, obj["op"])
	}
	rawPath, _ := obj["path"].(string)
	path, err := parsePointer(rawPath)
	if err != nil {
		return patchOp{}, err
	}
	op := patchOp{op: name, path: path, value: obj["value"], raw: rawPath}
	if name == "incr" {
		if _, isNumber := op.value.(json.Number); !isNumber {
			return patchOp{}, badRequest("The value of incr at %q must be a number.", rawPath)
		}
	}
	if name == "move" {
		rawFrom, _ := obj["from"].(string)
		if op.from, err = parsePointer(rawFrom); err != nil {
			return patchOp{}, err
		}
		if isPrefix(op.from, op.path) {
			return patchOp{}, badRequest("Cannot move %q into itself (%q).", rawFrom, rawPath)
		}
	}
	return op, nil
}

// parsePointer splits a JSON Pointer ("/a/b~1c" → [a, b/c]).
func parsePointer(p string) ([]string, error) {
	if !strings.HasPrefix(p, "/") || p == "/" {
		return nil, badRequest("The patch path %q is invalid: it must be a JSON Pointer to a property, like /status.", p)
	}
	segs := strings.Split(p[1:], "/")
	for i, s := range segs {
		if s == "" {
			return nil, badRequest("The patch path %q has an empty segment.", p)
		}
		segs[i] = strings.ReplaceAll(strings.ReplaceAll(s, "~1", "/"), "~0", "~")
	}
	return segs, nil
}

// isPrefix reports whether a is a prefix of (or equal to) b.
func isPrefix(a, b []string) bool { return len(a) <= len(b) && slices.Equal(a, b[:len(a)]) }

// checkProtected refuses paths that touch the id, the partition key (or a
// parent or child of it) or a system property.
func checkProtected(path, pkPath []string, raw string) error {
	if len(path) == 1 && (path[0] == "id" || isSystemProperty(path[0])) {
		return badRequest("The property %q cannot be changed by a patch.", raw)
	}
	if isPrefix(path, pkPath) || isPrefix(pkPath, path) {
		return badRequest("The partition key path %q cannot be changed by a patch.", raw)
	}
	return nil
}

// patch runs the condition and If-Match against the current document, then
// applies the operations to a deep copy, in order.
func (t *partitionTxn) patch(id string, spec patchSpec, ifMatch string) (opResult, error) {
	prev := t.get(id)
	if prev == nil {
		return opResult{}, notFound()
	}
	if ifMatch != "" && !etagMatches(ifMatch, prev.etag) {
		return opResult{}, preconditionFailed()
	}
	if err := checkPatchCondition(spec.condition, prev.body); err != nil {
		return opResult{}, err
	}
	body := deepCopy(prev.body).(map[string]any)
	for _, op := range spec.ops {
		if err := checkProtected(op.path, t.c.pkPath, op.raw); err != nil {
			return opResult{}, err
		}
		if op.op == "move" {
			if err := checkProtected(op.from, t.c.pkPath, op.raw); err != nil {
				return opResult{}, err
			}
		}
		var err error
		if body, err = applyPatchOp(body, op); err != nil {
			return opResult{}, err
		}
	}
	d, err := t.store(id, body, prev)
	if err != nil {
		return opResult{}, err
	}
	return opResult{status: http.StatusOK, doc: d, charge: t.c.patchCharge(prev, d, len(spec.ops))}, nil
}

// checkPatchCondition evaluates "from c where ..." (the FROM clause of a
// query, as the service documents it) on the one document; false is 412.
func checkPatchCondition(condition string, doc map[string]any) error {
	if strings.TrimSpace(condition) == "" {
		return nil
	}
	q, err := cosmossql.ParseCondition(condition)
	if err != nil {
		return badRequest("The patch condition %q is not a valid FROM ... WHERE clause: %v", condition, err)
	}
	ok, err := q.Matches(doc, nil)
	if err != nil {
		return badRequest("The patch condition %q could not be evaluated: %v", condition, err)
	}
	if !ok {
		return preconditionFailed()
	}
	return nil
}

func applyPatchOp(body map[string]any, op patchOp) (map[string]any, error) {
	var root any = body
	var err error
	switch op.op {
	case "move":
		var moved any
		if root, moved, err = takeAt(root, op.from, op.raw); err != nil {
			return nil, err
		}
		root, err = modifyAt(root, op.path, op.raw, func(parent any, key string) (any, error) {
			return addTo(parent, key, moved, op.raw)
		})
	default:
		root, err = modifyAt(root, op.path, op.raw, func(parent any, key string) (any, error) {
			return applyLeaf(op, parent, key)
		})
	}
	if err != nil {
		return nil, err
	}
	return root.(map[string]any), nil
}

func applyLeaf(op patchOp, parent any, key string) (any, error) {
	switch op.op {
	case "add":
		return addTo(parent, key, op.value, op.raw)
	case "set":
		return setIn(parent, key, op.value, op.raw)
	case "replace":
		return replaceIn(parent, key, op.value, op.raw)
	case "remove":
		out, _, err := removeFrom(parent, key, op.raw)
		return out, err
	case "incr":
		return incrementIn(parent, key, op.value.(json.Number), op.raw)
	}
	return nil, badRequest("Unknown patch operation %q.", op.op)
}

// modifyAt walks to the parent of path (every intermediate must exist),
// lets leaf change it, and returns the rebuilt node (slices may move).
func modifyAt(node any, path []string, raw string, leaf func(parent any, key string) (any, error)) (any, error) {
	if len(path) == 1 {
		return leaf(node, path[0])
	}
	switch n := node.(type) {
	case map[string]any:
		child, ok := n[path[0]]
		if !ok {
			return nil, badRequest("The patch path %q does not exist in the document.", raw)
		}
		updated, err := modifyAt(child, path[1:], raw, leaf)
		if err != nil {
			return nil, err
		}
		n[path[0]] = updated
		return n, nil
	case []any:
		i, err := existingIndex(n, path[0], raw)
		if err != nil {
			return nil, err
		}
		updated, err := modifyAt(n[i], path[1:], raw, leaf)
		if err != nil {
			return nil, err
		}
		n[i] = updated
		return n, nil
	}
	return nil, badRequest("The patch path %q goes through a value that is neither an object nor an array.", raw)
}

// takeAt removes the value at path and returns it (move's source).
func takeAt(root any, path []string, raw string) (any, any, error) {
	var taken any
	out, err := modifyAt(root, path, raw, func(parent any, key string) (any, error) {
		updated, value, err := removeFrom(parent, key, raw)
		taken = value
		return updated, err
	})
	return out, taken, err
}

func existingIndex(arr []any, key, raw string) (int, error) {
	i, err := strconv.Atoi(key)
	if err != nil || i < 0 || i >= len(arr) || strconv.Itoa(i) != key {
		return 0, badRequest("The patch path %q names array index %q, which does not exist.", raw, key)
	}
	return i, nil
}

// insertIndex is an index where add may insert: 0..len, or "-" (append).
func insertIndex(arr []any, key, raw string) (int, error) {
	if key == "-" {
		return len(arr), nil
	}
	i, err := strconv.Atoi(key)
	if err != nil || i < 0 || i > len(arr) || strconv.Itoa(i) != key {
		return 0, badRequest("The patch path %q names array index %q, which is out of range.", raw, key)
	}
	return i, nil
}

// addTo adds or replaces a property; in an array it inserts.
func addTo(parent any, key string, value any, raw string) (any, error) {
	switch p := parent.(type) {
	case map[string]any:
		p[key] = value
		return p, nil
	case []any:
		i, err := insertIndex(p, key, raw)
		if err != nil {
			return nil, err
		}
		return slices.Insert(p, i, value), nil
	}
	return nil, notContainer(raw)
}

// setIn is add, except that an existing array element is replaced.
func setIn(parent any, key string, value any, raw string) (any, error) {
	if arr, ok := parent.([]any); ok {
		i, err := insertIndex(arr, key, raw)
		if err != nil {
			return nil, err
		}
		if i < len(arr) {
			arr[i] = value
			return arr, nil
		}
		return append(arr, value), nil
	}
	return addTo(parent, key, value, raw)
}

func replaceIn(parent any, key string, value any, raw string) (any, error) {
	switch p := parent.(type) {
	case map[string]any:
		if _, ok := p[key]; !ok {
			return nil, badRequest("Cannot replace %q: the property does not exist.", raw)
		}
		p[key] = value
		return p, nil
	case []any:
		i, err := existingIndex(p, key, raw)
		if err != nil {
			return nil, err
		}
		p[i] = value
		return p, nil
	}
	return nil, notContainer(raw)
}

func removeFrom(parent any, key, raw string) (any, any, error) {
	switch p := parent.(type) {
	case map[string]any:
		v, ok := p[key]
		if !ok {
			return nil, nil, badRequest("Cannot remove %q: the property does not exist.", raw)
		}
		delete(p, key)
		return p, v, nil
	case []any:
		i, err := existingIndex(p, key, raw)
		if err != nil {
			return nil, nil, err
		}
		v := p[i]
		return slices.Delete(p, i, i+1), v, nil
	}
	return nil, nil, notContainer(raw)
}

// incrementIn adds delta to a number, creating the property if absent.
func incrementIn(parent any, key string, delta json.Number, raw string) (any, error) {
	switch p := parent.(type) {
	case map[string]any:
		current, ok := p[key]
		if !ok {
			p[key] = delta
			return p, nil
		}
		sum, err := addNumbers(current, delta, raw)
		if err != nil {
			return nil, err
		}
		p[key] = sum
		return p, nil
	case []any:
		i, err := existingIndex(p, key, raw)
		if err != nil {
			return nil, err
		}
		sum, err := addNumbers(p[i], delta, raw)
		if err != nil {
			return nil, err
		}
		p[i] = sum
		return p, nil
	}
	return nil, notContainer(raw)
}

// addNumbers keeps integers exact (as the service does for int64 values)
// and falls back to floating point otherwise.
func addNumbers(current any, delta json.Number, raw string) (json.Number, error) {
	n, ok := current.(json.Number)
	if !ok {
		return "", badRequest("Cannot increment %q: the current value is not a number.", raw)
	}
	a, errA := n.Int64()
	b, errB := delta.Int64()
	if errA == nil && errB == nil {
		if s := a + b; (s > a) == (b > 0) || b == 0 {
			return json.Number(strconv.FormatInt(s, 10)), nil
		}
	}
	fa, _ := n.Float64()
	fb, _ := delta.Float64()
	sum := fa + fb
	if math.IsInf(sum, 0) || math.IsNaN(sum) {
		return "", badRequest("Incrementing %q overflows.", raw)
	}
	return json.Number(strconv.FormatFloat(sum, 'g', -1, 64)), nil
}

func notContainer(raw string) error {
	return badRequest("The parent of patch path %q is neither an object nor an array.", raw)
}

// deepCopy copies decoded JSON so that a patch never touches a stored
// document.
func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = deepCopy(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = deepCopy(e)
		}
		return out
	}
	return v
}
