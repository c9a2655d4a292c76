package providertest

// instance_lockingTests: duroxide's provider_validation/instance_locking.rs, not ported yet.
func instanceLockingTests() []Test { return nil }
