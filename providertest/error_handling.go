package providertest

// error_handlingTests: duroxide's provider_validation/error_handling.rs, not ported yet.
func errorHandlingTests() []Test { return nil }
