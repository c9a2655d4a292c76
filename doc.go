// Package cdb stores durable orchestrations in Azure Cosmos DB (NoSQL API)
// behind a duroxide-style Provider / ProviderAdmin contract.
//
// The package has three layers, bottom to top:
//
//   - the Cosmos DB REST client (client.go, auth.go, batch.go, query.go,
//     containers.go, errors.go): wire details, signing, retries, diagnostics;
//   - the contract types (contract.go, workitem.go, event.go, management.go,
//     filters.go): Go shapes of duroxide 0.1.29's storage contract, with JSON
//     equal to duroxide's serde encoding;
//   - the provider built from the two.
//
// An in-memory Cosmos DB (the strict fake) backs tests and the demo; see
// NewFakeTransport.
package cdb
