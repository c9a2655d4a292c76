package cdb

// CompletionCoalescingForTest is how long a chained turn waits, after its
// first completion, for the others, so tests on a clock of their own can
// step past it.
const CompletionCoalescingForTest = completionCoalescing
