package providertest

// poison_messageTests: duroxide's provider_validation/poison_message.rs, not ported yet.
func poisonMessageTests() []Test { return nil }
