package providertest

// atomicityTests: duroxide's provider_validation/atomicity.rs, not ported yet.
func atomicityTests() []Test { return nil }
