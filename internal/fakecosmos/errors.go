package fakecosmos

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// Substatus codes the gateway sends in x-ms-substatus.
const (
	subStatusPartitionKeyMismatch  = 1001
	subStatusRangeGone             = 1002
	subStatusCompletingSplit       = 1007
	subStatusCrossPartitionServing = 1004
)

// Messages copied from the real gateway, because clients (and our provider)
// recognise some of them by text.
const (
	msgCrossPartitionNotServable = "The provided cross partition query can not be directly served by the gateway. This is a first chance (internal) exception that all newer clients will know how to handle gracefully. This exception is traced, but unless you see it bubble up as an exception (which only happens on older SDK clients), then you can safely ignore this message."
	msgCrossPartitionDisabled    = "Cross partition query is required but disabled. Please set x-ms-documentdb-query-enablecrosspartition to true, specify x-ms-documentdb-partitionkey, or revise your query to avoid this exception."
	msgNoCompositeIndex          = "The order by query does not have a corresponding composite index that it can be served from."
	msgOrderByNotIndexed         = "Order-by item requires a range index to be defined on the corresponding index path."
	msgPartitionKeyMismatch      = "PartitionKey extracted from document doesn't match the one specified in the header. Learn more: https://aka.ms/CosmosDB/sql/errors/wrong-pk-value"
	msgResourceExists            = "Entity with the specified id already exists in the system."
	msgResourceNotFound          = "Entity with the specified id does not exist in the system."
	msgPreconditionFailed        = "One of the specified pre-condition is not met."
	msgEntityTooLarge            = "Request size is too large."
	msgRangeGone                 = "The requested partition key range is gone (it was split). Refresh the partition key ranges and retry."
)

// cosmosError is a refusal: it becomes an error response with Cosmos DB's
// body shape and, when set, an x-ms-substatus header.
type cosmosError struct {
	status    int
	subStatus int
	message   string
	session   string // x-ms-session-token of a document operation's refusal
	lsn       int64
	// additionalErrorInfo, when set, is sent as the body's
	// "additionalErrorInfo" string: the gateway puts the query plan
	// (JSON) there when it refuses a cross-partition query (400/1004), and
	// the SDKs parse it from there.
	additionalErrorInfo string
}

// withAdditionalErrorInfo returns a copy of e whose body carries info.
func (e *cosmosError) withAdditionalErrorInfo(info string) *cosmosError {
	cp := *e
	cp.additionalErrorInfo = info
	return &cp
}

func (e *cosmosError) Error() string {
	if e.subStatus != 0 {
		return fmt.Sprintf("%d/%d %s", e.status, e.subStatus, e.message)
	}
	return fmt.Sprintf("%d %s", e.status, e.message)
}

func newError(status int, format string, args ...any) *cosmosError {
	return &cosmosError{status: status, message: fmt.Sprintf(format, args...)}
}

func newSubError(status, subStatus int, format string, args ...any) *cosmosError {
	return &cosmosError{status: status, subStatus: subStatus, message: fmt.Sprintf(format, args...)}
}

func badRequest(format string, args ...any) *cosmosError {
	return newError(http.StatusBadRequest, format, args...)
}

func notFound() *cosmosError { return newError(http.StatusNotFound, msgResourceNotFound) }

func conflict() *cosmosError { return newError(http.StatusConflict, msgResourceExists) }

func preconditionFailed() *cosmosError {
	return newError(http.StatusPreconditionFailed, msgPreconditionFailed)
}

func tooLarge() *cosmosError { return newError(http.StatusRequestEntityTooLarge, msgEntityTooLarge) }

// errorCode is the "code" member of an error body: the status's name as the
// .NET gateway spells it.
func errorCode(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "BadRequest"
	case http.StatusUnauthorized:
		return "Unauthorized"
	case http.StatusForbidden:
		return "Forbidden"
	case http.StatusNotFound:
		return "NotFound"
	case http.StatusMethodNotAllowed:
		return "MethodNotAllowed"
	case http.StatusRequestTimeout:
		return "RequestTimeout"
	case http.StatusConflict:
		return "Conflict"
	case http.StatusGone:
		return "Gone"
	case http.StatusPreconditionFailed:
		return "PreconditionFailed"
	case http.StatusRequestEntityTooLarge:
		return "RequestEntityTooLarge"
	case http.StatusFailedDependency:
		return "FailedDependency"
	case http.StatusTooManyRequests:
		return "TooManyRequests"
	case 449:
		return "RetryWith"
	case http.StatusServiceUnavailable:
		return "ServiceUnavailable"
	case http.StatusInternalServerError:
		return "InternalServerError"
	}
	return http.StatusText(status)
}

// errorBody renders {"code","message"} the way the gateway does: the
// message ends with the activity id after a CRLF.
func errorBody(e *cosmosError, activityID string) []byte {
	quoted, _ := json.Marshal(e.message)
	body, _ := json.Marshal(struct {
		Code                string `json:"code"`
		Message             string `json:"message"`
		AdditionalErrorInfo string `json:"additionalErrorInfo,omitempty"`
	}{
		Code:                errorCode(e.status),
		Message:             fmt.Sprintf("Message: {\"Errors\":[%s]}\r\nActivityId: %s, Request URI: fakecosmos, RequestStats: , SDK: fakecosmos", quoted, activityID),
		AdditionalErrorInfo: e.additionalErrorInfo,
	})
	return body
}
