package handoff

// Kind is what an announcement to a queue's fetches says.
type Kind uint8

const (
	// Partition: work was queued in a partition; the look woken for it
	// queries that partition.
	Partition Kind = iota
	// ReadyItem: a worker item was made ready for this process's fetches;
	// the look takes a ready item or nothing, and never queries.
	ReadyItem
	// ReadyTurn: an instance's turn was made ready (a start, a chained
	// turn); the look takes a ready turn or nothing, and never queries.
	ReadyTurn
)

// Wake is one announcement: of work in a partition, or of something made
// ready in this process. A Wake of a ready thing stands for that one thing,
// not for a look's worth of a partition.
type Wake struct {
	Kind Kind
	PK   string // the partition: Partition's, and ReadyTurn's instance
}

// InPartition announces work queued in pk.
func InPartition(pk string) Wake { return Wake{Kind: Partition, PK: pk} }

// ItemReady announces a worker item made ready.
func ItemReady() Wake { return Wake{Kind: ReadyItem} }

// TurnReady announces pk's turn made ready.
func TurnReady(pk string) Wake { return Wake{Kind: ReadyTurn, PK: pk} }

// InPartitions announces work in each of pks, one a partition key.
func InPartitions(pks ...string) []Wake {
	out := make([]Wake, len(pks))
	for i, pk := range pks {
		out[i] = InPartition(pk)
	}
	return out
}

// Repeated is n copies of w.
func Repeated(w Wake, n int) []Wake {
	out := make([]Wake, max(n, 0))
	for i := range out {
		out[i] = w
	}
	return out
}

// Partitioned says the announcement names a partition to look in.
func (w Wake) Partitioned() bool { return w.Kind == Partition }
