package providertest

// sessionsTests: duroxide's provider_validation/sessions.rs, not ported yet.
func sessionsTests() []Test { return nil }
