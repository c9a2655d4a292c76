package providertest

// multi_executionTests: duroxide's provider_validation/multi_execution.rs, not ported yet.
func multiExecutionTests() []Test { return nil }
