package providertest

// bulkDeletionTests: duroxide's provider_validation/bulk_deletion.rs, not ported yet.
func bulkDeletionTests() []Test { return nil }
