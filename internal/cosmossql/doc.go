// Package cosmossql parses and evaluates the subset of the Azure Cosmos DB
// NoSQL query language that the in-memory fake (internal/fakecosmos) serves.
//
// The grammar follows the one the Cosmos .NET SDK ships
// (Microsoft.Azure.Cosmos/src/Query/Core/Parser/sql.g4): keywords are
// case-insensitive, the literals true, false, null and undefined are
// lowercase only, NOT binds as tightly as unary minus, and reserved words
// cannot be property names after a dot (write c["value"], not c.value).
//
// Evaluation follows Cosmos rather than ANSI SQL: a missing property is
// undefined, comparing values of different types yields undefined, AND, OR
// and NOT use Cosmos three-valued logic, and WHERE keeps a document only when
// its predicate is exactly true.
//
// Values are what encoding/json produces with Decoder.UseNumber: maps,
// slices, strings, bools, nil and json.Number. Numbers compare as IEEE
// doubles, as Cosmos stores them. A Query is immutable once parsed and safe
// for concurrent use. Results share structure with the input documents:
// copy them before mutating.
package cosmossql
