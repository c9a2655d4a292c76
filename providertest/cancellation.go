package providertest

// cancellationTests: duroxide's provider_validation/cancellation.rs, not ported yet.
func cancellationTests() []Test { return nil }
