// Package sdkcompat checks that Microsoft's official Go SDK (azcosmos) works
// against `cdb emulator` as it works against a real account. It is its own
// module so that the cdb library never depends on the SDK. It imports no cdb
// package and stays out of the repository's go.work, so run it with
// GOWORK=off (make sdk-compat does).
package sdkcompat
