package fakecosmos

import (
	"net/http"
	"strings"
)

// Priority-based execution: a request may say x-ms-cosmos-priority-level
// High or Low (https://aka.ms/CosmosDB/PriorityBasedExecution); an account
// with the feature on throttles Low requests first, one without it ignores
// the level. The fake has no throughput of its own to throttle: it checks
// the value, and hands it to faults (RequestInfo.PriorityLevel), so a test
// can throttle Low requests alone, as such an account does first.

const hdrPriorityLevel = "x-ms-cosmos-priority-level"

// priorityLevel is r's priority level, "High" when it names none, or a
// 400 for a value that is neither High nor Low (the SDKs send those two
// only, and name them case-insensitively).
func priorityLevel(r *http.Request) (string, error) {
	v := r.Header.Get(hdrPriorityLevel)
	switch {
	case v == "" || strings.EqualFold(v, "High"):
		return "High", nil
	case strings.EqualFold(v, "Low"):
		return "Low", nil
	}
	return "", badRequest("The value '%s' of header %s is invalid: want High or Low.", v, hdrPriorityLevel)
}
