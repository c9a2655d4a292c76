package providertest

// capability_filteringTests: duroxide's provider_validation/capability_filtering.rs, not ported yet.
func capabilityFilteringTests() []Test { return nil }
