package providertest

import "testing"

// TestSuiteHoldsEveryDuroxideTest pins the number of tests per module to
// duroxide 0.1.29's, so a lost or duplicated port shows.
func TestSuiteHoldsEveryDuroxideTest(t *testing.T) {
	want := map[string]int{
		"atomicity": 4, "error_handling": 7, "instance_creation": 4, "instance_locking": 11,
		"lock_expiration": 13, "multi_execution": 5, "queue_semantics": 8, "poison_message": 9,
		"long_polling": 5, "cancellation": 16, "capability_filtering": 20, "custom_status": 7,
		"management": 13, "deletion": 13, "prune": 4, "bulk_deletion": 4,
		"sessions": 33, "tag_filtering": 10,
		"kv_store": 35,
	}
	names := map[string]bool{}
	for _, m := range Modules() {
		if n, ok := want[m.Name]; ok && len(m.Tests) != n {
			t.Errorf("module %s has %d tests, duroxide has %d", m.Name, len(m.Tests), n)
		}
		for _, tc := range m.Tests {
			if names[tc.Name] {
				t.Errorf("test %s appears twice", tc.Name)
			}
			names[tc.Name] = true
		}
	}
}
