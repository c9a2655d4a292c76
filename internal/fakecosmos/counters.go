package fakecosmos

import "sync"

// Counts is a snapshot of the counters, for tests and benchmarks.
type Counts struct {
	// Requests counts every request, refused and faulted ones included.
	Requests int64
	// RequestCharge sums x-ms-request-charge over all responses.
	RequestCharge float64
	// ByOp counts requests per operation (OpUnknown for unroutable ones).
	ByOp map[Op]int64
	// DocumentsScanned counts the documents queries and read feeds
	// evaluated (those an index hands over, or every one a scan reads:
	// what they are charged for); DocumentsReturned the results they
	// returned.
	DocumentsScanned  int64
	DocumentsReturned int64
	// DocumentsWalked counts the documents this fake evaluated to serve
	// them: its own cost, not the model's, which its value index
	// (valueindex.go) keeps to the documents holding a sought value.
	DocumentsWalked int64
	// CrossPartitionQueries counts query pages served without a partition
	// key or range: the requests a provider should avoid on hot paths.
	CrossPartitionQueries int64
}

type counters struct {
	mu sync.Mutex
	c  Counts
}

func (k *counters) reset() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.c = Counts{ByOp: map[Op]int64{}}
}

func (k *counters) request(op Op) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.c.Requests++
	k.c.ByOp[op]++
}

func (k *counters) charge(ru float64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.c.RequestCharge = roundCharge(k.c.RequestCharge + ru)
}

func (k *counters) query(scanned, returned int, crossPartition bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.c.DocumentsScanned += int64(scanned)
	k.c.DocumentsReturned += int64(returned)
	if crossPartition {
		k.c.CrossPartitionQueries++
	}
}

func (k *counters) walked(n int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.c.DocumentsWalked += int64(n)
}

func (k *counters) snapshot() Counts {
	k.mu.Lock()
	defer k.mu.Unlock()
	c := k.c
	c.ByOp = make(map[Op]int64, len(k.c.ByOp))
	for op, n := range k.c.ByOp {
		c.ByOp[op] = n
	}
	return c
}

// Counts returns a snapshot of the counters.
func (s *Server) Counts() Counts { return s.counters.snapshot() }

// ResetCounts sets every counter to zero.
func (s *Server) ResetCounts() { s.counters.reset() }
