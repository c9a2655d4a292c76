package providertest

// long_pollingTests: duroxide's provider_validation/long_polling.rs, not ported yet.
func longPollingTests() []Test { return nil }
