// Package fakecosmos is a strict, in-memory Azure Cosmos DB (NoSQL API)
// gateway. It serves Cosmos DB's REST wire protocol as an http.Handler, in-process through
// Server.Transport (no sockets), or on a loopback port (`cdb emulator`).
//
// "Strict" means it refuses what a real account refuses, because code that
// passes against a lenient fake fails in production: the HMAC signature and
// the date are checked, If-Match is honoured everywhere (also inside
// batches), documents over 2 MB, batches over 100 operations or 2 MB, patches
// over 10 operations are refused, and cross-partition queries that the real
// gateway cannot serve (ORDER BY, TOP, OFFSET, DISTINCT, aggregates) answer
// 400 with substatus 1004. Multi-field ORDER BY needs a composite index, as
// on a real account.
//
// # Query plans
//
// A POST to docs with x-ms-cosmos-is-query-plan-request answers the
// gateway's PartitionedQueryExecutionInfo (version 2): queryInfo (distinct
// type, top, offset, limit, orderBy, orderByExpressions, aggregates,
// hasSelectValue, rewrittenQuery) and queryRanges (always the whole key
// space), so that the SDKs run cross-partition ORDER BY, TOP, OFFSET/LIMIT,
// DISTINCT and VALUE aggregates range by range and merge. The rewritten
// query is the gateway's: ORDER BY projects {_rid, orderByItems: [{item}],
// payload} and keeps the SDK's {documentdb-formattableorderbyquery-filter}
// placeholder; COUNT and SUM become SELECT VALUE [{"item": COUNT(...)}], AVG
// sends {sum, count}, MIN and MAX {min|max, count}; OFFSET n LIMIT m becomes
// OFFSET 0 LIMIT n+m. The 1004 refusal carries the same plan in the error
// body's additionalErrorInfo, which is what makes the SDKs ask for a plan.
// A query whose merge needs a feature the client did not list in
// x-ms-cosmos-supported-query-features is refused as the gateway does; GROUP
// BY, aggregates without VALUE, and aggregates combined with TOP, OFFSET,
// DISTINCT or ORDER BY are refused with 400 naming them (also instead of the
// 1004 of a plain query). A plan answer carries no session token.
//
// # Request units
//
// Every response carries x-ms-request-charge from this deterministic model,
// Microsoft's documented one. W(size) and R(size) are the documented table
// of RU by item size, linear between its rows and the 1 KB row's charge
// below 1 KB (the size is that of the document as stored, system
// properties included):
//
//	size (KB)   1     2     4     8     16    32     64     128    256    512     1024   2048
//	R (read)    1.00  1.04  1.14  1.33  1.67  2.19   4.76   9.95   20.28  40.95   145.9  291.8
//	W (write)   4.95  6.29  6.67  7.04  9.52  11.23  22.67  48.19  98.29  184.57  625    1250
//
//	point read (item)             R(size)
//	create, upsert that creates   W(size) + 0.2 RU per indexed term
//	replace, upsert that replaces W(old) + W(new) + 0.2 RU per indexed term
//	                              removed or added between old and new
//	patch                         as replace + 0.4 RU per patch operation
//	delete                        W(old) + 0.2 RU per indexed term of old
//	query / read feed page        2.3 RU + 0.05 RU per document evaluated
//	                              + 0.1 RU per started KB returned (a
//	                              started KB is ceil(bytes/1024), at least 1)
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
// Microsoft calls its figures illustrative, and documents no charge for a
// batch as a whole, a rolled-back batch or a 409: the batch sum, the
// rollback's 1 RU and a 409's 1 RU are this model's assumptions. The
// model has no consistency multiplier (Strong and Bounded Staleness reads
// cost twice as much on an account) and one region (an account charges
// writes in every region). Calibrate against a real account with cdb
// doctor.
//
// The fake keeps no range index, but charges as if it had the container's
// indexing policy (index.go, queryindex.go), so that RU figures do not grow
// with documents an index would skip. A write's indexed terms are the
// scalar values at paths the policy indexes (each array element counting;
// id and _ts always, _rid, _self, _etag and _attachments never; the most
// precise included or excluded path decides, excluded on a tie) plus one
// per composite index whose paths the document all has; indexingMode
// "none" indexes nothing. A replace's changed terms compare old and new as
// (path, value) multisets, composite tuples included, so a changed value
// counts twice; _ts, which every write rewrites, is left out. So a 1 KB
// document with 10 indexed terms costs 4.95 + 0.2 * 10 = 6.95 RU to create
// under the default policy, 4.95 RU with nothing indexed, and an opt-in
// policy (only the paths queries use) lies between; replacing it with two
// values changed costs 4.95 + 4.95 + 0.2 * 4 = 10.7 RU, and patching those
// two values 0.8 RU more.
//
// The documents a query evaluates are those the index hands over:
//   - ORDER BY walks its index (the composite index, or the single path's
//     range index) in order; equality terms of the WHERE clause's top-level
//     ANDs on a leading run of the ORDER BY paths, then a range term on the
//     next one, bound the walk, which stops at the document that gives the
//     page's last result (TOP, OFFSET/LIMIT, the page size). Other terms are
//     residual: documents they drop are still evaluated. So
//     `WHERE c.type = @t AND c.visibleAt <= @now AND c.lockedUntil <= @now
//     ORDER BY c.type, c.visibleAt, c.seq` with a composite index (type,
//     visibleAt, seq) costs the same whatever the other types' backlog,
//     plus the locked items it steps over; ORDER BY c.visibleAt, c.seq
//     walks every type's visible items.
//   - Without ORDER BY, every equality, range (<, <=, >, >=, BETWEEN) or
//     lookup term (IN, IS_DEFINED, STARTSWITH, ARRAY_CONTAINS of a constant
//     array, and OR/AND of those) on indexed paths selects from the index;
//     with none (no WHERE, only residual terms, unindexed paths) the whole
//     scope is scanned, as a read feed is.
//   - Aggregates, DISTINCT and SELECT VALUE walk what the index selects, on
//     every page.
//
// Results never depend on this: a query returns what it would with no
// index.
//
// An ORDER BY on one path needs that path in the range index, and on
// several a matching composite index: otherwise 400, naming the composite
// index to add. Included and excluded paths are validated ("/" names
// ending in "/?" or "/*").
//
// # Partition key ranges
//
// A container starts with Options.PartitionKeyRanges ranges that split the
// effective-partition-key (EPK) space evenly. A partition key value's EPK is
// the service's, as the SDKs compute it to route requests (bulk picks each
// operation's range by it), in the container's partitionKey.version: V2
// (version 2) is MurmurHash3 x64 128-bit over the value's binary encoding,
// reversed, top two bits cleared, 32 hex digits below "4000"; V1 (version 1
// or absent) is the number encoding of MurmurHash3 x86 32-bit over the value
// (strings cut to 100 characters) followed by the value's encoding
// ("05C1..."). Ranges compare EPKs as strings, "" is the start and "FF" the
// end; the even split is over the hash a version uses (the first 64 bits
// for V2, the 32-bit hash for V1), so keys spread over every range, and
// bounds are EPKs: 32 hex digits for V2, the number encoding of a hash for
// V1. SplitPartitionKeyRanges halves every range; queries that still name a
// split range answer 410 with substatus 1002. A filter-and-project query's
// continuation from a split range resumes in each of its children, as the
// service reads a parent's continuation there; another range refuses it.
//
// # Session consistency
//
// The account says it runs at Session consistency, and the fake keeps
// session positions as the service does: every partition key range counts
// its committed writes in an LSN (children of a split start from their
// parent's), a write stamps the documents it stores with its LSN, and every
// answer about documents (success or refusal, point operation, batch, query
// or read feed page) carries x-ms-session-token "<range id>:-1#<lsn>" and
// the lsn header for the range it touched. Request tokens are checked (a
// malformed one answers 400) and, by default, change nothing: every read
// sees every committed write.
//
// With Options.StaleReadsWithoutSessionToken, reads may be served by a
// lagging replica, deterministically: a point read, query or read feed
// sees a document whose last write its token does not cover (no token for
// the document's range or any parent of it, or one with a lower LSN) as it
// was before that write: the previous version, nothing if the write
// created it, the deleted document if the write deleted it. Each document
// keeps one previous version (deleted ones a tombstone), so the replica is
// at most one write behind per document. Transactional batches (their reads
// included) and writes are served by the primary and always see the current
// state. A token ahead of the range's LSN (say, kept from a container since
// deleted and created again) answers 404 with substatus 1002
// (ReadSessionNotAvailable). A read answers with the range's current LSN, as
// if the replica caught up right after serving it, so a client that echoes
// the tokens it receives reads its own and everyone's writes on its next
// read, and one that sends none keeps reading one write behind.
//
// # Bulk
//
// A batch request without x-ms-cosmos-batch-atomic: True is a bulk request,
// as the SDKs' bulk executors send it: addressed to a partition key range
// (x-ms-documentdb-partitionkeyrangeid, each operation naming its
// "partitionKey") or to one logical partition (the pk header). Every
// operation runs and commits on its own, in order; a failure undoes
// nothing. The answer is the per-operation array, 200 if all succeeded,
// else 207. Without x-ms-cosmos-batch-continue-on-error: True the
// operations after the first failure do not run and answer 424. An
// operation whose partition lies outside the addressed range (by the EPK,
// as the SDK routed it) answers 410/1002 in its slot. The batch limits (100 operations, 2 MB) apply.
//
// # Time to live
//
// defaultTtl and items' "ttl" are enforced on the server's clock
// (Options.Now, which also stamps _ts): with a container defaultTtl (-1 or
// n seconds), an item whose _ts plus its ttl (its own "ttl", else the
// default; -1 never) is not in the future is gone from point reads,
// queries, read feeds, batches and bulk, and writes treat its id as free
// (create succeeds, replace/patch/delete answer 404, If-Match 412).
// Without a defaultTtl items' ttl is ignored. The predicate is
// (*document).expiredAt (ttl.go).
//
// # The value index
//
// What the fake evaluates is its own cost, apart from the charge: for each
// property path that an equality term (path = constant) has sought, it
// keeps a hash index of the container, from the value's key (numbers by
// value, so 1 and 1.0 share one; strings exactly; null apart from a
// missing property, which has none; arrays and objects by content) to the
// partition keys and ids holding it. An index is built from every document
// the first time a query seeks its path, and kept exact on every write
// (create, replace, upsert, patch, delete, batch, bulk) and purge of
// expired items; it lists a document under the values of both versions a
// read may see of it (the stale mode's previous version too, and a
// tombstone's deleted one). It spans the container, so a split changes
// nothing: a page keeps the entries whose partition's effective key lies
// in its span.
//
// A query page then evaluates only the documents listed under one of its
// equality terms' values, the term with the fewest, among the top-level
// AND terms its RU model seeks with (so every document it is charged for
// is among them); a term on the partition key's path is not used within
// one partition, nor one on an array element, nor a constant that is
// undefined. Without such a term (a read feed, a full scan, ORDER BY
// whose index walk the term does not bound) it walks the whole scope.
// Results, their order, continuations (a narrowed page that fills still
// ends where the whole walk would), session tokens and charges are the
// same either way: QueryIndexChecked computes every page both ways and
// records any difference, which the provider's validation suites and this
// package's tests assert is none. Counts().DocumentsWalked counts what was
// evaluated. UnindexedFilters lists every path a query filtered on, with a
// term an index answers, that the container's policy leaves out: the
// answer is right, and a real account charges it as a scan, so a client
// with an opt-in policy can test that the policy covers its queries.
//
// # Change feed
//
// GET docs with A-IM: Incremental feed reads the latest-version change feed
// of one partition key range (x-ms-documentdb-partitionkeyrangeid) or one
// logical partition (pk header): the current version of every document
// whose last write comes after the start, in LSN order, deleted documents
// left out. If-None-Match selects the start: absent, from the beginning;
// "*", from now; otherwise the etag of an earlier answer, which is the
// range's LSN quoted ("42"). If-Modified-Since keeps documents written
// since. A page holds up to x-ms-max-item-count documents (default 100),
// extended to the end of its last LSN so that a batch's writes are never
// split; its etag continues after it. Nothing new answers 304 with the
// etag. The feed is served by the primary. Refused with 400: the
// all-versions-and-deletes mode ("Full-Fidelity Feed"), a feed without a
// range or partition key, and a part of a range (x-ms-start-epk); a split
// range answers 410/1002.
//
// # Throughput (offers)
//
// A database or container created with x-ms-offer-throughput (manual: 400
// to 1,000,000 RU/s in steps of 100) or x-ms-cosmos-offer-autopilot-settings
// ({"maxThroughput": N}, autoscale: 1,000 to 1,000,000 in steps of 1,000)
// gets an offer resource (offerVersion "V2"); both headers at once, or
// values outside those ranges, answer 400. As on a provisioned account, a
// container created without either gets 400 RU/s manual of its own unless
// its database has throughput, which it then shares. GET /offers lists the
// offers, POST /offers with a query filters them (the SDKs' ReadThroughput
// asks for root.offerResourceId = the resource's _rid), GET /offers/{rid}
// reads one (signed with the rid lower-cased); an offer goes with its
// resource. Options.Serverless makes a serverless account: every offers
// request, and a create with throughput, answers 400 with the service's
// message ("Reading or replacing offers is not supported for serverless
// accounts."). Throughput is not enforced: no request is throttled for it.
//
// Priority-based execution: x-ms-cosmos-priority-level is High or Low (any
// case), else 400; the level is passed to faults (RequestInfo), which is
// how a test throttles Low requests first. There is no RU/s budget that
// throttles by itself.
//
// Not implemented (refused with 400 "not supported by this fake", or simply
// absent): stored procedures, triggers, UDFs, users and permissions,
// replacing an offer (changing throughput), hierarchical (MultiHash)
// partition keys, and addressing resources by _rid.
package fakecosmos
