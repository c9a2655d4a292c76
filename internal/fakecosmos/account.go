package fakecosmos

import (
	"encoding/json"
	"net/http"
	"slices"
)

// accountRegion is one entry of writableLocations / readableLocations.
// azcosmos routes every later request to databaseAccountEndpoint, so it must
// be the address the client can reach.
type accountRegion struct {
	Name     string `json:"name"`
	Endpoint string `json:"databaseAccountEndpoint"`
}

// queryEngineConfiguration is a JSON document embedded as a string, as the
// service sends it.
const queryEngineConfiguration = `{"maxSqlQueryInputLength":262144,"maxJoinsPerSqlQuery":5,"maxLogicalAndPerSqlQuery":500,"maxLogicalOrPerSqlQuery":500,"maxUdfRefPerSqlQuery":10,"maxInExpressionItemsCount":16000,"queryMaxInMemorySortDocumentCount":500,"maxQueryRequestTimeoutFraction":0.9,"sqlAllowNonFiniteNumbers":false,"sqlAllowAggregateFunctions":true,"sqlAllowSubQuery":true,"sqlAllowScalarSubQuery":true,"allowNewKeywords":true,"sqlAllowLike":true,"sqlAllowGroupByClause":true,"maxSpatialQueryCells":12,"spatialMaxGeometryPointCount":256,"sqlAllowTop":true,"enableSpatialIndexing":true}`

// readAccount answers GET /: the database account's properties, in the
// shape azcosmos v1.4.2 parses (accountProperties in its
// cosmos_location_cache.go) plus the members the service always sends.
func (s *Server) readAccount(*request) (*result, error) {
	region := []accountRegion{{Name: "fakecosmos", Endpoint: s.currentEndpoint()}}
	readable := region
	if more := s.readRegions.Load(); more != nil {
		readable = append(slices.Clone(region), *more...)
	}
	body, err := json.Marshal(map[string]any{
		"_self":                        "",
		"id":                           "fakecosmos",
		"_rid":                         "fakecosmos",
		"media":                        "//media/",
		"addresses":                    "//addresses/",
		"_dbs":                         "//dbs/",
		"writableLocations":            region,
		"readableLocations":            readable,
		"enableMultipleWriteLocations": false,
		"userReplicationPolicy":        map[string]any{"asyncReplication": false, "minReplicaSetSize": 1, "maxReplicasetSize": 4},
		"userConsistencyPolicy":        map[string]any{"defaultConsistencyLevel": "Session"},
		"systemReplicationPolicy":      map[string]any{"minReplicaSetSize": 1, "maxReplicasetSize": 4},
		"readPolicy":                   map[string]any{"primaryReadCoefficient": 1, "secondaryReadCoefficient": 1},
		"queryEngineConfiguration":     queryEngineConfiguration,
	})
	if err != nil {
		return nil, err
	}
	return &result{status: http.StatusOK, body: body, charge: chargeMetadata}, nil
}

// AddReadRegion lists one more region in readableLocations, after the
// write region (as an account with read regions lists them). Requests are
// served wherever they arrive: a region's endpoint is only where a client
// sends them.
func (s *Server) AddReadRegion(name, endpoint string) {
	for {
		old := s.readRegions.Load()
		var next []accountRegion
		if old != nil {
			next = slices.Clone(*old)
		}
		next = append(next, accountRegion{Name: name, Endpoint: endpoint})
		if s.readRegions.CompareAndSwap(old, &next) {
			return
		}
	}
}
