package providertest

// deletionTests: duroxide's provider_validation/deletion.rs, not ported yet.
func deletionTests() []Test { return nil }
