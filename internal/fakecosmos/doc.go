// Package fakecosmos is a strict, in-memory Azure Cosmos DB (NoSQL API)
// gateway. It serves the REST wire protocol (reference A in
// shared/reference/cosmos-rest.md) as an http.Handler, in-process through
// Server.Transport (no sockets), or on a loopback port (`cdb emulator`).
//
// "Strict" means it refuses what a real account refuses, because code that
// passes against a lenient fake fails in production: the HMAC signature and
// the date are checked, If-Match is honoured everywhere (also inside
// batches), documents over 2 MB, batches over 100 operations or 2 MB, patches
// over 10 operations are refused, and cross-partition queries that the real
// gateway cannot serve (ORDER BY, TOP, OFFSET, DISTINCT, aggregates, GROUP
// BY) answer 400 with substatus 1004. Multi-field ORDER BY needs a composite
// index, as on a real account.
//
// # Request units
//
// Every response carries x-ms-request-charge from this deterministic model
// (a "started KB" is ceil(bytes/1024), at least 1; the size is that of the
// document as stored, system properties included):
//
//	point read (item)             1 RU per started KB
//	create / replace / upsert     5.5 RU + 1.2 RU per started KB
//	patch                         as replace, on the patched document
//	delete                        5 RU
//	query / read feed page        2.3 RU + 0.05 RU per document evaluated
//	                              + 0.5 RU per started KB returned
//	transactional batch           the sum of its operations' charges; on a
//	                              rollback the failing operation costs 1 RU
//	                              and the others (424) 0
//	account, database, container,
//	partition key range requests  1 RU
//	any refusal (4xx/5xx)         1 RU
//	an injected fault             0 RU (nothing ran); a lost response
//	                              (FaultLoseResponse) is charged as executed
//
// Charges are rounded to two decimals. Counts().RequestCharge sums them.
//
// # Partition key ranges
//
// A container starts with Options.PartitionKeyRanges ranges that split the
// effective-partition-key space evenly. A partition key value's effective key
// is the first 32 bits of SHA-256 over its canonical JSON form, scaled into
// [0, 0xFF000000) and written as 8 upper-case hex digits, so that every key
// sorts below the space's end "FF" as on a real account. Range boundaries
// are written the same way ("" is the start, "FF" the end).
// SplitPartitionKeyRanges halves every range; queries that still name a
// split range answer 410 with substatus 1002.
//
// Not implemented (refused with 400 "not supported by this fake", or simply
// absent): stored procedures, triggers, UDFs, users and permissions,
// offers/throughput, change feed (A-IM), query plans, hierarchical
// (MultiHash) partition keys, non-atomic bulk batches, TTL expiry (defaultTtl
// is stored, not enforced), and addressing resources by _rid.
package fakecosmos
