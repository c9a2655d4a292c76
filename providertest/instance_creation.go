package providertest

// instance_creationTests: duroxide's provider_validation/instance_creation.rs, not ported yet.
func instanceCreationTests() []Test { return nil }
