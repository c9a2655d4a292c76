package providertest

// managementTests: duroxide's provider_validation/management.rs, not ported yet.
func managementTests() []Test { return nil }
