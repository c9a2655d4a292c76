// Package jscompat checks that Microsoft's JavaScript SDK (@azure/cosmos,
// pinned in tools/azure-cosmos) works against `cdb emulator`: its test runs
// the named checks of tools/azure-cosmos/conformance.cjs with node and fails
// on any failed check. It has no Go API.
package jscompat
