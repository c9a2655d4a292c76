package providertest

// custom_statusTests: duroxide's provider_validation/custom_status.rs, not ported yet.
func customStatusTests() []Test { return nil }
