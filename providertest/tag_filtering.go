package providertest

// tagFilteringTests: duroxide's provider_validation/tag_filtering.rs, not ported yet.
func tagFilteringTests() []Test { return nil }
