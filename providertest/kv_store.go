package providertest

// kvStoreTests: duroxide's provider_validation/kv_store.rs, not ported yet.
func kvStoreTests() []Test { return nil }
