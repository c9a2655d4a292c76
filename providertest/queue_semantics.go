package providertest

// queue_semanticsTests: duroxide's provider_validation/queue_semantics.rs, not ported yet.
func queueSemanticsTests() []Test { return nil }
