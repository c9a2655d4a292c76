package cdb

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The provider keeps every document of an instance in one logical partition
// (partition key path /pk), so a turn commits in one transactional batch.
// Document ids are short constants or numbers and never contain the
// instance id; the instance id lives in the partition key and in the
// `instance` field. See ARCHITECTURE.md for the model.

// Document types, the `type` field of every provider document.
const (
	docInstance   = "inst"        // one per instance: metadata, lock, custom status
	docMessage    = "msg"         // an orchestrator-queue message
	docWork       = "work"        // a worker-queue item (ActivityExecuteMessage)
	docWorkGone   = "work-x"      // a cancelled activity's tombstone
	docHistory    = "hist"        // the events one turn appended to one execution
	docHistPart   = "hist-part"   // events of a turn too large for its commit batch, staged
	docExecution  = "exec"        // one execution's status and counters
	docOutbox     = "outbox"      // effects a commit left for the relay to deliver
	docOutboxPart = "outbox-part" // entries of an outbox too large for its commit batch, staged
	docConsumed   = "consumed"    // a relayed queue item that was consumed: refuses a redelivery
)

// partitionKeyPath is the container's partition key path.
const partitionKeyPath = "/pk"

// instanceDocID is the document id of an instance's instance document.
const instanceDocID = "inst"

// maxInlinePartitionKeyBytes is the longest instance id used verbatim as a
// partition key value; longer ids are hashed (Cosmos DB allows 2 KB).
const maxInlinePartitionKeyBytes = 1024

// maxInstanceIDBytes bounds instance ids: they are stored in every document.
const maxInstanceIDBytes = 64 * 1024

// dispatchSlots is the number of dispatch slots queue items are spread over.
const dispatchSlots = 256

// validateInstanceID refuses instance ids that cannot be stored, before
// anything is written.
func validateInstanceID(op, instance string) error {
	switch {
	case instance == "":
		return refuse(op, "instance id must not be empty", ErrInvalidInput)
	case !utf8.ValidString(instance):
		return refuse(op, "instance id must be valid UTF-8", ErrInvalidInput)
	case len(instance) > maxInstanceIDBytes:
		return refuse(op, fmt.Sprintf("instance id is %d bytes; at most %d can be stored", len(instance), maxInstanceIDBytes), ErrInvalidInput)
	}
	return nil
}

// instancePartitionKey is the partition key value of an instance's
// documents: the id itself, or a hash of it when the id is too long for a
// partition key. Ids that start with the hash prefix are hashed too,
// whatever their length, so an id spelled like another id's hash never
// shares its partition. The full id is always stored in the `instance`
// field.
func instancePartitionKey(instance string) string {
	if len(instance) <= maxInlinePartitionKeyBytes && !strings.HasPrefix(instance, hashedPartitionKeyPrefix) {
		return instance
	}
	sum := sha256.Sum256([]byte(instance))
	return hashedPartitionKeyPrefix + hex.EncodeToString(sum[:])
}

// hashedPartitionKeyPrefix starts the partition key of a hashed id.
const hashedPartitionKeyPrefix = "sha256:"

// dispatchSlot spreads instances over the dispatch slots, so concurrent
// dispatchers can query disjoint sets.
func dispatchSlot(instance string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(instance))
	return int(h.Sum32() % dispatchSlots)
}

// activitySlot spreads activities over the dispatch slots one by one, not
// by instance: a fan-out's activities land in different slots, so
// concurrent fetches querying disjoint slots pick them up in parallel.
func activitySlot(act ActivityExecuteMessage) int {
	return dispatchSlot(act.Instance + "\x00" + strconv.FormatUint(act.ExecutionID, 10) + "\x00" + strconv.FormatUint(act.ID, 10))
}

// instanceDoc is an instance's metadata, lock and custom status. It is
// created by the first fetch (as the lock holder) without a name; the
// instance exists, in the contract's sense, once an ack gives it a name.
type instanceDoc struct {
	ID       string `json:"id"`
	PK       string `json:"pk"`
	Type     string `json:"type"`
	Instance string `json:"instance"`
	Slot     int    `json:"slot"`

	LockToken   string `json:"lockToken,omitempty"`
	LockedUntil int64  `json:"lockedUntil"`

	Name          string         `json:"name,omitempty"`
	Version       *string        `json:"version,omitempty"`
	Parent        *string        `json:"parent,omitempty"`
	CurrentExec   uint64         `json:"currentExec"`
	Status        InstanceStatus `json:"status,omitempty"`      // of the current execution
	Output        *string        `json:"output,omitempty"`      // of the current execution
	OutputRef     string         `json:"outputRef,omitempty"`   // the value document holding Output, when large (largeoutputs.go)
	KVMerged      uint64         `json:"kvMerged,omitempty"`    // the current execution's, as its execution document has it (kv.go)
	CompletedAt   *int64         `json:"completedAt,omitempty"` // of the current execution, ms
	Pinned        *uint64        `json:"pinned,omitempty"`      // packed pinned duroxide version of the current execution
	CustomStatus  *string        `json:"customStatus,omitempty"`
	CustomVersion uint64         `json:"customStatusVersion"`
	CreatedAt     int64          `json:"createdAt"`
	UpdatedAt     int64          `json:"updatedAt"`

	// LastAck is the lock token of the last committed ack, so an ack whose
	// response was lost can tell whether it committed.
	LastAck string `json:"lastAck,omitempty"`
	// Deleting names the deletion intent that is removing the instance; a
	// marked instance reads as deleted (deletion.go).
	Deleting string `json:"deleting,omitempty"`
	// Life is drawn afresh whenever the instance document is created, so it
	// tells this life of the id from the next: a deletion marks only the
	// life it was asked to delete (deletion.go).
	Life string `json:"life,omitempty"`
	// ParentLife is the life of the parent whose start began this life of
	// the instance (lives.go): what it sends its parent is addressed to that
	// life, and what another life of the parent sends it is dropped.
	ParentLife string `json:"parentLife,omitempty"`
	// StartMsg is the id of the start message whose enqueue created the
	// document (or claimed one a fetch created), so that a start whose
	// answer was lost tells its own write from another start's
	// (exclusive_start.go); empty on a document a fetch created, or one
	// written before it was recorded.
	StartMsg string `json:"startMsg,omitempty"`
	// ReleasedAt is when a holder last gave the lock back without
	// committing (an abandon), putting its batch back in the queue: a fetch
	// whose candidate query ran before that saw those messages locked, and
	// completes its batch with them (lockAndLoad).
	ReleasedAt int64 `json:"releasedAt,omitempty"`
	// StartHeldUntil is when the instance's StartOrchestration, which an
	// abandon with a delay hid, is visible again: until then a batch of the
	// instance without it goes to the runtime named after it (startHidden)
	// rather than waiting or being dropped as an instance's never started.
	StartHeldUntil int64 `json:"startHeldUntil,omitempty"`
	// Seq is above every seq the last commit gave a message: a process that
	// locks the instance hands out higher ones, so what an orchestration
	// sends keeps its order across turns taken by processes whose clocks
	// disagree.
	Seq int64 `json:"seq,omitempty"`
	// ParkedUntil, when set, says messages of this partition were parked
	// (parking.go) and become visible again by this time at the latest: the
	// fetch that takes what they wait for (a start, a ContinueAsNew
	// message) brings them back into its batch first.
	ParkedUntil int64 `json:"parkedUntil,omitempty"`
	// Parked, when set, says a runtime gave the instance's last batches
	// back because its code no longer matches the history (parkrecord.go).
	// A committed turn drops it (nextInstanceDoc).
	Parked *parkedDoc `json:"parked,omitempty"`
	// RetainUntil, when set (Config.Retention), is when the finished
	// instance leaves: from then on it reads as gone, its documents expire
	// by their TTL, and a start of its id clears what is left first
	// (retention.go). TTL is the instance document's own, once the
	// retention's follow-up gave the partition its TTLs; every later write
	// of the document keeps it ending at RetainUntil.
	RetainUntil int64 `json:"retainUntil,omitempty"`
	TTL         int   `json:"ttl,omitempty"`
	// Rev counts commits. It restarts when an id is reused after a delete,
	// so caches are keyed by LastAck, never by Rev.
	Rev uint64 `json:"rev"`
	// Trace is the trace context of the start that began this life of the
	// instance (TraceCarrier): written with the lock document by the
	// start, or by the first turn from its start message when the document
	// came first, and handed out with every item of the instance.
	Trace TraceContext `json:"trace,omitzero"`
	// Orch is the name of the orchestration whose instance the item is
	// for, when its writer knew it (a start, a commit's items for its own
	// instance, an activity's completion): the requests that take and
	// consume the item are counted to that name (provider_telemetry.go).
	// Telemetry only: nothing decides on it.
	Orch string `json:"orch,omitempty"`

	ETag ETag `json:"_etag,omitempty"`
}

// exists reports whether an ack has created the instance (given it a name).
func (d *instanceDoc) exists() bool { return d != nil && d.Name != "" }

// queueDoc is an orchestrator-queue message or a worker-queue item.
type queueDoc struct {
	ID       string `json:"id"`
	PK       string `json:"pk"`
	Type     string `json:"type"`
	Instance string `json:"instance"`
	Slot     int    `json:"slot"`

	VisibleAt   int64  `json:"visibleAt"`
	Seq         int64  `json:"seq"` // enqueue order among equal visibleAt
	LockToken   string `json:"lockToken,omitempty"`
	LockedUntil int64  `json:"lockedUntil"`
	Attempts    uint32 `json:"attempts"`

	// Worker items only.
	Exec     uint64  `json:"exec,omitempty"`
	Activity uint64  `json:"activity,omitempty"`
	Session  *string `json:"session,omitempty"`
	// SessionKey is the partition key and the session id: the identity of
	// the session document, for leaving a session's items out of a query.
	SessionKey string  `json:"sessionKey,omitempty"`
	Tag        *string `json:"tag,omitempty"`
	// Pinned is the instance's pinned version as the turn that scheduled
	// the item left it: what the process that acks it knows of the
	// instance when it stamps the completion (ownwrites.go).
	Pinned *uint64 `json:"pinned,omitempty"`

	Item string `json:"item"` // the encoded WorkItem
	// ItemLength is the item's length (UTF-16 units) as a worker candidate
	// query returns it with an item's head; never stored.
	ItemLength int `json:"itemLength,omitempty"`
	TTL        int `json:"ttl,omitempty"`
	// SeqVisible marks an immediate item, visible from its seq's
	// millisecond (queueTime): a fetch serves it up to its horizon. An item
	// without it has a due time (a timer, a delay), served only once the
	// fetching process's clock reaches it.
	SeqVisible bool `json:"seqVisible,omitempty"`
	// Writer is the process (Config.ProcessLeases) that wrote the item and
	// will take it itself: other processes leave it to the writer for a
	// poll interval, so they do not race it for its own work (ownwrites.go).
	Writer string `json:"writer,omitempty"`
	// Relayed marks an item an outbox delivered on its own (not in a relay
	// batch, which applies once: relaybatch.go): whoever consumes it leaves
	// a consumedMarker in its place, so a relay that delivers it again gets
	// a 409 (outbox.go).
	Relayed bool `json:"relayed,omitempty"`
	// ConsumedTTL, when set, makes whoever consumes the item leave a
	// consumedMarker that lives this many seconds: an enqueue whose
	// response was lost resends the item with the same id, and must meet
	// the marker, not an empty place, if the item was consumed meanwhile.
	ConsumedTTL int `json:"consumedTtl,omitempty"`
	// HeldFrom marks a parked orchestrator message (parking.go): its
	// visibleAt before it was parked, its place in its instance's order.
	// A parked message's visibleAt is when it is handed over if nothing it
	// waits for has come.
	HeldFrom int64 `json:"heldFrom,omitempty"`
	// ToLife is the life of the instance the message is for, when its
	// sender knows it (a commit's message to its own instance, a child's to
	// its parent); From and FromLife are the instance whose commit sent it
	// and that instance's life. A fetch consumes, unseen, a message sent to
	// another life of its instance (lives.go).
	ToLife   string `json:"toLife,omitempty"`
	From     string `json:"from,omitempty"`
	FromLife string `json:"fromLife,omitempty"`
	// Trace is the trace context a start or an activity carries
	// (TraceCarrier), kept here beside the item: the item is duroxide's
	// JSON and never carries it.
	Trace TraceContext `json:"trace,omitzero"`
	// Orch is the name of the orchestration whose instance the item is
	// for, when its writer knew it (a start, a commit's items for its own
	// instance, an activity's completion): the requests that take and
	// consume the item are counted to that name (provider_telemetry.go).
	// Telemetry only: nothing decides on it.
	Orch string `json:"orch,omitempty"`

	ETag ETag `json:"_etag,omitempty"`
}

// historyDoc holds the events one ack appended to one execution, so a turn
// costs one document of the commit batch however many events it adds.
type historyDoc struct {
	ID       string   `json:"id"`
	PK       string   `json:"pk"`
	Type     string   `json:"type"`
	Instance string   `json:"instance"`
	Exec     uint64   `json:"exec"`
	First    uint64   `json:"first"`
	EventIDs []uint64 `json:"eventIds"`
	Bytes    int      `json:"bytes"`
	Data     string   `json:"data"` // JSON array of encoded events
	// Parts, when set, name the staged documents that hold the events
	// instead of Data, in order (ARCHITECTURE.md, Large turns).
	Parts []string `json:"parts,omitempty"`
	// Ack is the lock token of the ack that wrote it, so an ack whose
	// response was lost can recognise its own commit even after another
	// turn has committed since (commit.go).
	Ack string `json:"ack,omitempty"`
	// KV counts the turn's KV events: the current execution's KV delta is
	// read from the history documents (and parts) that have some (kv.go).
	KV int `json:"kv,omitempty"`
}

// historyPart holds some of a large turn's events. It is written before
// the commit, expiring, and the commit makes it permanent.
type historyPart struct {
	ID       string `json:"id"`
	PK       string `json:"pk"`
	Type     string `json:"type"`
	Instance string `json:"instance"`
	Exec     uint64 `json:"exec"`
	Data     string `json:"data"`
	TTL      int    `json:"ttl,omitempty"`
	KV       int    `json:"kv,omitempty"`    // its history document's
	First    uint64 `json:"first,omitempty"` // its history document's
}

// executionDoc is one execution's status and counters.
type executionDoc struct {
	ID          string         `json:"id"`
	PK          string         `json:"pk"`
	Type        string         `json:"type"`
	Instance    string         `json:"instance"`
	Exec        uint64         `json:"exec"`
	Status      InstanceStatus `json:"status"`
	Output      *string        `json:"output,omitempty"`
	OutputRef   string         `json:"outputRef,omitempty"` // the value document holding Output, when large (largeoutputs.go)
	Pinned      *uint64        `json:"pinned,omitempty"`
	StartedAt   int64          `json:"startedAt"`
	CompletedAt *int64         `json:"completedAt,omitempty"`
	Events      int            `json:"events"`
	Bytes       int            `json:"bytes"`
	// CarryForward is the number of carry-forward events of the execution's
	// OrchestrationStarted (get_instance_stats' queue_pending_count).
	CarryForward int `json:"carryForward,omitempty"`
	// KVMerged is the highest event id whose KV mutation the KV store
	// holds: the delta is the execution's KV events after it (kv.go).
	KVMerged uint64 `json:"kvMerged,omitempty"`
}

// outboxDoc carries effects a commit could not write itself: documents for
// other instances' partitions, which its batch cannot reach, and overflow
// that would have pushed the commit past a batch's limits. The relay
// delivers them after the commit, in order; every delivered document has a
// deterministic id, so a repeat is a 409. Entries that do not fit in the
// commit batch are staged in outbox parts (ARCHITECTURE.md, Outbox).
type outboxDoc struct {
	ID        string        `json:"id"`
	PK        string        `json:"pk"`
	Type      string        `json:"type"`
	Instance  string        `json:"instance"`
	CreatedAt int64         `json:"createdAt"`
	Entries   []outboxEntry `json:"entries"`
	// Parts name the staged outbox-part documents that hold the entries
	// after Entries, in order.
	Parts []outboxPartRef `json:"parts,omitempty"`
	// Rev is the instance's rev the commit wrote: an instance's outboxes
	// are delivered in this order, so one sender's messages keep theirs. 0
	// (a worker's completion) is unordered.
	Rev uint64 `json:"rev,omitempty"`
	// Owner is the lease token of the relay delivering the outbox and
	// BeatAt (ms) its last sign of life: no other relay takes an outbox
	// whose beat is younger than its OutboxMinAge.
	Owner  string `json:"owner,omitempty"`
	BeatAt int64  `json:"beatAt,omitempty"`
	// Delivered counts the entries known delivered, in order: a relay that
	// takes the outbox over goes on from there.
	Delivered int `json:"delivered,omitempty"`
	// Self says some entry is a message for the outbox's own instance (one
	// that overflowed the commit batch, a ContinueAsNew message say): no
	// fetch hands over the instance's messages while such an outbox is
	// pending (lockAndLoad). Its work items do not count: they are no part
	// of a fetch's batch.
	Self bool `json:"self,omitempty"`

	ETag ETag `json:"_etag,omitempty"`
}

// outboxPartRef names a staged part of an outbox and its entry count.
type outboxPartRef struct {
	ID      string `json:"id"`
	Entries int    `json:"entries"`
}

// outboxPart holds some of a large outbox's entries. It is written before
// the commit, expiring, and the commit makes it permanent.
type outboxPart struct {
	ID       string        `json:"id"`
	PK       string        `json:"pk"`
	Type     string        `json:"type"`
	Instance string        `json:"instance"`
	Outbox   string        `json:"outbox"`
	Entries  []outboxEntry `json:"entries"`
	TTL      int           `json:"ttl,omitempty"`
}

// outboxEntry is one document to write into a partition.
type outboxEntry struct {
	PK     string    `json:"pk"`
	Upsert bool      `json:"upsert,omitempty"` // tombstones overwrite; everything else is created once
	Doc    entryBody `json:"doc"`
	// Role marks the two entries of a start in another partition: the
	// instance document (entryShell) and the start message (entryStart),
	// whose delivery is settled like a client's start (relay.deliverEntry).
	Role string `json:"role,omitempty"`
}

// The roles of outbox entries that start an instance.
const (
	entryShell = "shell"
	entryStart = "start"
)

// entryBody is an entry's document, stored as JSON. Outboxes written before
// it was stored as base64 text; those still decode.
type entryBody []byte

func (b entryBody) MarshalJSON() ([]byte, error) {
	if len(b) == 0 {
		return []byte("null"), nil
	}
	return b, nil
}

func (b *entryBody) UnmarshalJSON(data []byte) error {
	if len(data) > 0 && data[0] == '"' {
		var legacy []byte
		if err := json.Unmarshal(data, &legacy); err != nil {
			return fmt.Errorf("decode outbox entry: %w", err)
		}
		*b = legacy
		return nil
	}
	*b = append((*b)[:0], data...)
	return nil
}

// consumedMarker takes the place of a relayed queue item its consumer
// deleted: same id, so a relay delivering the item again gets a 409, and a
// TTL, so markers do not accumulate (outbox.go).
type consumedMarker struct {
	ID       string `json:"id"`
	PK       string `json:"pk"`
	Type     string `json:"type"`
	Instance string `json:"instance"`
	TTL      int    `json:"ttl"`
}

func historyDocID(exec, first uint64) string {
	return "h|" + strconv.FormatUint(exec, 10) + "|" + strconv.FormatUint(first, 10)
}

func executionDocID(exec uint64) string { return "x|" + strconv.FormatUint(exec, 10) }

// workDocID is deterministic, so a cancellation can name the item and a
// relayed item lands once.
func workDocID(exec, activity uint64) string {
	return "w|" + strconv.FormatUint(exec, 10) + "|" + strconv.FormatUint(activity, 10)
}
