package bench

// The shapes a run keeps in flight. Each is one orchestration made of
// steps (an activity, a timer, an event or a child) and is measured per
// orchestration and per step, so that a cost growing with the work shows
// as a per-step figure that grows.

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/durable"
)

// Shape is the orchestration a run keeps in flight.
type Shape string

const (
	// ShapeFanOut schedules TasksPerInstance activities at once and joins
	// them: duroxide's stress protocol. A step is an activity.
	ShapeFanOut Shape = "fanout"
	// ShapeSequence runs TasksPerInstance activities one after another,
	// with a short durable timer after every tenth. A step is an activity.
	ShapeSequence Shape = "sequence"
	// ShapeTimers waits on one durable timer of Wait. A step is the timer.
	ShapeTimers Shape = "timers"
	// ShapeEvents waits for an external event that the harness raises
	// Wait after the start, through the runtime's client as an
	// application would. A step is the event.
	ShapeEvents Shape = "events"
	// ShapeChildren starts TasksPerInstance sub-orchestrations at once,
	// each running one activity, and joins them. A step is a child.
	ShapeChildren Shape = "children"
)

// Shapes are the shapes a run can take, in the order the CLI lists them.
func Shapes() []Shape {
	return []Shape{ShapeFanOut, ShapeSequence, ShapeTimers, ShapeEvents, ShapeChildren}
}

// ParseShape reads a shape's name.
func ParseShape(s string) (Shape, error) {
	for _, sh := range Shapes() {
		if string(sh) == s {
			return sh, nil
		}
	}
	names := make([]string, len(Shapes()))
	for i, sh := range Shapes() {
		names[i] = string(sh)
	}
	return "", fmt.Errorf("unknown shape %q: one of %s", s, strings.Join(names, ", "))
}

// Step names what one step of the shape is, as the tables say it.
func (s Shape) Step() string {
	switch s {
	case ShapeTimers:
		return "timer"
	case ShapeEvents:
		return "event"
	case ShapeChildren:
		return "child"
	default:
		return "activity"
	}
}

// Steps names the shape's steps, plural.
func (s Shape) Steps() string {
	if s == ShapeChildren {
		return "children"
	}
	if s == ShapeFanOut || s == ShapeSequence {
		return "activities"
	}
	return s.Step() + "s"
}

// steps is how many steps one orchestration of the shape takes.
func (s Shape) steps(cfg Config) int {
	switch s {
	case ShapeTimers, ShapeEvents:
		return 1
	default:
		return cfg.TasksPerInstance
	}
}

// activities is how many activities one orchestration of the shape runs.
func (s Shape) activities(cfg Config) int {
	switch s {
	case ShapeTimers, ShapeEvents:
		return 0
	default:
		return cfg.TasksPerInstance
	}
}

// orchestration is the name the shape's orchestration is registered under.
func (s Shape) orchestration() string {
	switch s {
	case ShapeSequence:
		return sequenceName
	case ShapeTimers:
		return timerName
	case ShapeEvents:
		return eventName
	case ShapeChildren:
		return parentName
	default:
		return fanOutName
	}
}

const (
	fanOutName   = "FanoutOrchestration"
	sequenceName = "SequenceOrchestration"
	timerName    = "TimerOrchestration"
	eventName    = "EventOrchestration"
	parentName   = "ParentOrchestration"
	childName    = "ChildOrchestration"
	activityName = "ProcessTask"

	// benchEvent is the event the events shape waits for.
	benchEvent = "go"
	// sequenceTimerEvery and sequenceTimer are the sequence's timers: one
	// of this length after every this many activities.
	sequenceTimerEvery = 10
	sequenceTimer      = 10 * time.Millisecond
)

// shapeInput is every shape's orchestration input.
type shapeInput struct {
	TaskCount int   `json:"task_count"`
	WaitMs    int64 `json:"wait_ms,omitempty"`
}

// activityInput is the bench activity's input: which step of which
// instance it is, so a sequence's steps can be timed.
type activityInput struct {
	Instance string `json:"instance,omitempty"`
	Step     int    `json:"task"`
}

func decodeShapeInput(input string) (shapeInput, error) {
	var in shapeInput
	if err := json.Unmarshal([]byte(input), &in); err != nil {
		return in, fmt.Errorf("bench input: %w", err)
	}
	return in, nil
}

func activityCall(instance string, step int) string {
	raw, _ := json.Marshal(activityInput{Instance: instance, Step: step})
	return string(raw)
}

// fanOut schedules task_count activities and waits for them all.
func fanOut(ctx *durable.OrchestrationContext, input string) (string, error) {
	in, err := decodeShapeInput(input)
	if err != nil {
		return "", err
	}
	futures := make([]*durable.Future, in.TaskCount)
	for i := range futures {
		futures[i] = ctx.ScheduleActivity(activityName, activityCall("", i))
	}
	return joined(ctx, futures, "task")
}

// sequence runs task_count activities one after another, a short timer
// after every tenth.
func sequence(ctx *durable.OrchestrationContext, input string) (string, error) {
	in, err := decodeShapeInput(input)
	if err != nil {
		return "", err
	}
	for i := range in.TaskCount {
		if _, err := ctx.ScheduleActivity(activityName, activityCall(ctx.InstanceID(), i)).Await(); err != nil {
			return "", fmt.Errorf("step %d: %w", i, err)
		}
		if (i+1)%sequenceTimerEvery == 0 && i+1 < in.TaskCount {
			if _, err := ctx.ScheduleTimer(sequenceTimer).Await(); err != nil {
				return "", fmt.Errorf("timer after step %d: %w", i, err)
			}
		}
	}
	return fmt.Sprintf(`{"steps":%d}`, in.TaskCount), nil
}

// timer waits on one durable timer of wait_ms.
func timer(ctx *durable.OrchestrationContext, input string) (string, error) {
	in, err := decodeShapeInput(input)
	if err != nil {
		return "", err
	}
	if _, err := ctx.ScheduleTimer(time.Duration(in.WaitMs) * time.Millisecond).Await(); err != nil {
		return "", fmt.Errorf("timer: %w", err)
	}
	return `{"timer":"fired"}`, nil
}

// event waits for the bench's event and returns its data.
func event(ctx *durable.OrchestrationContext, _ string) (string, error) {
	data, err := ctx.WaitForEvent(benchEvent).Await()
	if err != nil {
		return "", fmt.Errorf("event: %w", err)
	}
	return data, nil
}

// parent starts task_count children at once and waits for them all.
func parent(ctx *durable.OrchestrationContext, input string) (string, error) {
	in, err := decodeShapeInput(input)
	if err != nil {
		return "", err
	}
	futures := make([]*durable.Future, in.TaskCount)
	for i := range futures {
		futures[i] = ctx.ScheduleSubOrchestration(childName, fmt.Sprintf(`{"task":%d}`, i))
	}
	return joined(ctx, futures, "child")
}

// child runs one activity.
func child(ctx *durable.OrchestrationContext, input string) (string, error) {
	out, err := ctx.ScheduleActivity(activityName, input).Await()
	if err != nil {
		return "", fmt.Errorf("child's activity: %w", err)
	}
	return out, nil
}

// joined waits for every future and fails with the first error.
func joined(ctx *durable.OrchestrationContext, futures []*durable.Future, what string) (string, error) {
	for i, r := range ctx.Join(futures...) {
		if r.Err != nil {
			return "", fmt.Errorf("%s %d: %w", what, i, r.Err)
		}
	}
	return fmt.Sprintf(`{"tasks":%d}`, len(futures)), nil
}

// newRegistry registers every shape's orchestrations and the activity,
// which takes delay and reports each step it runs to steps.
func newRegistry(delay time.Duration, steps *stepClock) (*durable.Registry, error) {
	reg := durable.NewRegistry()
	for name, fn := range map[string]durable.OrchestrationFunc{
		fanOutName: fanOut, sequenceName: sequence, timerName: timer, eventName: event, parentName: parent, childName: child,
	} {
		if err := reg.RegisterOrchestration(name, fn); err != nil {
			return nil, err
		}
	}
	err := reg.RegisterActivity(activityName, func(ctx durable.ActivityContext, input string) (string, error) {
		var in activityInput
		if json.Unmarshal([]byte(input), &in) == nil && in.Instance != "" {
			steps.began(in.Instance, in.Step)
		}
		select {
		case <-time.After(delay):
			return input, nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
	return reg, err
}

// stepClock records when each step of a sequence began, and with one
// orchestration in flight what the runtime's provider had spent then, so
// a step's time and cost can be told apart from its neighbours'.
type stepClock struct {
	stats func() cdb.ClientStats // nil: costs are not recorded
	mu    sync.Mutex
	marks map[string][]stepMark
}

// stepMark is one step's beginning.
type stepMark struct {
	at    time.Time
	stats cdb.ClientStats
	seen  bool
}

func newStepClock(stats func() cdb.ClientStats) *stepClock {
	return &stepClock{stats: stats, marks: map[string][]stepMark{}}
}

// began records the first start of an instance's step (a retried step
// keeps its first).
func (c *stepClock) began(instance string, step int) {
	mark := stepMark{at: time.Now(), seen: true}
	if c.stats != nil {
		mark.stats = c.stats()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	marks := c.marks[instance]
	for len(marks) <= step {
		marks = append(marks, stepMark{})
	}
	if !marks[step].seen {
		marks[step] = mark
	}
	c.marks[instance] = marks
}

// intervals are the times from each step's start to the next one's,
// leaving out those with a timer between them.
func (c *stepClock) intervals() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []time.Duration
	for _, marks := range c.marks {
		for i := 0; i+1 < len(marks); i++ {
			if (i+1)%sequenceTimerEvery == 0 || !marks[i].seen || !marks[i+1].seen {
				continue
			}
			out = append(out, marks[i+1].at.Sub(marks[i].at))
		}
	}
	return out
}

// StepCost is what one step of a sequence cost on average over ten
// consecutive steps (one of its timers among them): the runtime's
// provider's requests and RU from one step's start to the next one's.
type StepCost struct {
	From, To     int // the steps averaged, counted from 1
	Requests, RU float64
}

// costs are the mean cost of a step over steps 2 to 11 and over the last
// ten, of the orchestrations that had enough steps, when their costs were
// recorded (one orchestration ran at a time).
func (c *stepClock) costs() (early, late *StepCost) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stats == nil {
		return nil, nil
	}
	var firsts, lasts []StepCost
	for _, marks := range c.marks {
		n := len(marks)
		if n < 2*sequenceTimerEvery+2 {
			continue
		}
		if w, ok := windowCost(marks, 1); ok {
			firsts = append(firsts, w)
		}
		if w, ok := windowCost(marks, n-1-sequenceTimerEvery); ok {
			lasts = append(lasts, w)
		}
	}
	return meanCost(firsts), meanCost(lasts)
}

// windowCost is the mean cost of the ten steps from marks[from].
func windowCost(marks []stepMark, from int) (StepCost, bool) {
	to := from + sequenceTimerEvery
	a, b := marks[from], marks[to]
	if !a.seen || !b.seen {
		return StepCost{}, false
	}
	return StepCost{
		From: from + 1, To: to,
		Requests: float64(b.stats.Requests-a.stats.Requests) / sequenceTimerEvery,
		RU:       (b.stats.RequestCharge - a.stats.RequestCharge) / sequenceTimerEvery,
	}, true
}

// meanCost is the mean of windows over the same steps, nil when there are
// none.
func meanCost(windows []StepCost) *StepCost {
	if len(windows) == 0 {
		return nil
	}
	m := StepCost{From: windows[0].From, To: windows[0].To}
	for _, w := range windows {
		m.Requests += w.Requests / float64(len(windows))
		m.RU += w.RU / float64(len(windows))
	}
	return &m
}

// Describe says in words what one orchestration of the shape does.
func (s Shape) Describe(tasks int, wait time.Duration) string {
	switch s {
	case ShapeSequence:
		return fmt.Sprintf("%d activities of 10 ms one after another, a %s timer after every %dth", tasks, sequenceTimer, sequenceTimerEvery)
	case ShapeTimers:
		return fmt.Sprintf("one durable timer of %s", wait)
	case ShapeEvents:
		return fmt.Sprintf("a wait for an external event, raised %s after the start", wait)
	case ShapeChildren:
		return fmt.Sprintf("%d sub-orchestrations at once, each running one activity of 10 ms", tasks)
	default:
		return fmt.Sprintf("%d activities of 10 ms each at once", tasks)
	}
}
