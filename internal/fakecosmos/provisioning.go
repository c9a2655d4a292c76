package fakecosmos

import (
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
)

// Provisioning behaviours of a real account the fake can show: metadata
// writes refused to Entra ID tokens and, on an account that forbids them
// through its keys, to the key; and a container that is not usable for a
// moment after it is created.

// isMetadataWrite reports the operations that create, change or delete a
// database or a container.
func isMetadataWrite(op Op) bool {
	switch op {
	case OpCreateDatabase, OpDeleteDatabase, OpCreateContainer, OpReplaceContainer, OpDeleteContainer:
		return true
	}
	return false
}

// ForbidMetadataWrites makes the account refuse (or, false, accept again)
// creating, changing and deleting databases and containers with 403, as an
// account with disableKeyBasedMetadataWriteAccess does; reads pass.
func (s *Server) ForbidMetadataWrites(forbid bool) { s.metadataWritesForbidden.Store(forbid) }

// subStatusAADRequestNotAuthorized is the substatus of a 403 for an
// operation an Entra ID (AAD) token may not make in the data plane.
const subStatusAADRequestNotAuthorized = 5300

// refuseMetadataWrite refuses creating, changing or deleting a database or
// a container where the real service does: with an Entra ID token always
// (a data-plane role covers items, not metadata: 403/5300), and with the
// key on an account with key-based metadata writes disabled
// (disableKeyBasedMetadataWriteAccess). Reads pass.
func (s *Server) refuseMetadataWrite(r *http.Request, op Op, signed credentialKind) error {
	switch {
	case !isMetadataWrite(op):
		return nil
	case signed == signedWithAAD:
		return newSubError(http.StatusForbidden, subStatusAADRequestNotAuthorized,
			"Operation '%s' on resource '%s' is not allowed through Azure Cosmos DB endpoint. "+
				"The given request [%s %s] cannot be authorized by AAD token in data plane.", r.Method, r.URL.Path, r.Method, r.URL.Path)
	case !s.metadataWritesForbidden.Load():
		return nil
	}
	return newError(http.StatusForbidden, "Operation '%s' on resource '%s' is not allowed through Azure Cosmos DB endpoint. "+
		"Please switch on such operations for your account, or perform this operation through Azure Resource Manager, "+
		"Azure Portal, Azure CLI or Azure Powershell.", r.Method, r.URL.Path)
}

// subStatusOwnerResourceNotFound is the substatus of a 404 about the
// container rather than the item.
const subStatusOwnerResourceNotFound = 1003

// subStatusWriteForbidden is the substatus of a 403 for a write that
// reached a region that does not take writes.
const subStatusWriteForbidden = 3

// warmUp counts the document requests a new container still answers
// 404/1003 (owner resource not found), as a real account may right after
// creating it.
type warmUp struct{ left atomic.Int64 }

// notReadyYet spends one of a new container's warm-up answers.
func (s *Server) notReadyYet(rt route, op Op) error {
	if s.newContainerWarmUp == 0 || !isDocumentOp(op) {
		return nil
	}
	c, err := s.lookupContainer(rt)
	if err != nil {
		return nil // the operation itself says what is missing
	}
	if c.warmUp.left.Add(-1) < 0 {
		c.warmUp.left.Store(0)
		return nil
	}
	return newSubError(http.StatusNotFound, subStatusOwnerResourceNotFound, "Owner resource does not exist")
}

// FailOver moves the account's write region to endpoint, as a regional
// failover does: the account document lists it first for writes, and a
// write that still reaches another host (a pooled connection to the old
// region's gateway) answers 403 with substatus 3 (write forbidden). Reads
// are served wherever they arrive.
func (s *Server) FailOver(endpoint string) {
	s.endpoint.Store(endpoint)
	s.failedOver.Store(true)
}

// refuseWriteElsewhere is the old write region's answer to a write after a
// failover.
func (s *Server) refuseWriteElsewhere(r *http.Request, op Op) error {
	if !s.failedOver.Load() || r.Method == http.MethodGet || op == OpQuery || op == OpQueryPlan {
		return nil
	}
	want, err := url.Parse(s.currentEndpoint())
	if err != nil || strings.EqualFold(r.Host, want.Host) {
		return nil
	}
	return newSubError(http.StatusForbidden, subStatusWriteForbidden, "The requested operation cannot be performed at this region: writes go to the account's write region.")
}
