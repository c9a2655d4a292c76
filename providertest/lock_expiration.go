package providertest

// lock_expirationTests: duroxide's provider_validation/lock_expiration.rs, not ported yet.
func lockExpirationTests() []Test { return nil }
