// Package cosmostest runs test suites against "a Cosmos DB": the strict
// in-memory fake in every go test, @vercel/cosmosdb-server when make test
// provides it, and a real account or the Microsoft emulator when
// COSMOS_ENDPOINT is set.
//
// A Target says what its Cosmos DB cannot do (Quirks, each with a reason),
// so a suite skips exactly those tests and says why. Workarounds for the
// third-party server's bugs live only here, in a test RoundTripper; the
// library itself is written to the real protocol.
package cosmostest
