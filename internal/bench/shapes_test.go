package bench

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEveryShapeCompletesAndCountsItsSteps runs each shape and checks its
// per-step figures are its per-orchestration ones divided by its steps,
// and that it ran the activities it is made of.
func TestEveryShapeCompletesAndCountsItsSteps(t *testing.T) {
	for _, shape := range Shapes() {
		t.Run(string(shape), func(t *testing.T) {
			cfg := Config{Shape: shape, Orchestrations: 3, MaxInFlight: 3, TasksPerInstance: 3, Wait: 50 * time.Millisecond,
				OrchestrationConcurrency: 2, WorkerConcurrency: 2}
			res, err := Run(context.Background(), cfg, Target{})
			require.NoError(t, err)
			require.Equal(t, 3, res.Completed, "completed, of %d launched (%d failed)", res.Launched, res.Failed)
			steps, activities := 3, 3
			if shape == ShapeTimers || shape == ShapeEvents {
				steps, activities = 1, 0
			}
			assert.Equal(t, steps, res.StepsPerOrchestration)
			assert.EqualValues(t, 3*activities, res.WorkerItems, "worker items acked")
			assert.InDelta(t, res.RequestsPerOrchestration/float64(steps), res.RequestsPerStep, 1e-9)
			assert.InDelta(t, res.RUPerOrchestration/float64(steps), res.RUPerStep, 1e-9)
			assert.InDelta(t, res.OrchestrationsPerSecond*float64(steps), res.StepsPerSecond, 1e-9)
			assert.InDelta(t, res.OrchestrationsPerSecond*float64(activities), res.ActivitiesPerSecond, 1e-9)
			assert.Positive(t, res.StepP50)
			assert.LessOrEqual(t, res.StepP50, res.StepP99)
			if shape == ShapeChildren {
				assert.GreaterOrEqual(t, res.TurnsPerOrchestration, 1.0+2*float64(steps), "the parent's turns and each child's")
			}
		})
	}
}

// TestWaitingShapesTimeTheirStepFromWhenItCould: a timer's step is timed
// from its due time and an event's from its raise, so neither counts the
// wait the shape asked for.
func TestWaitingShapesTimeTheirStepFromWhenItCould(t *testing.T) {
	const wait = 300 * time.Millisecond
	for _, shape := range []Shape{ShapeTimers, ShapeEvents} {
		t.Run(string(shape), func(t *testing.T) {
			res, err := Run(context.Background(), Config{Shape: shape, Orchestrations: 2, MaxInFlight: 2, Wait: wait}, Target{})
			require.NoError(t, err)
			require.Equal(t, 2, res.Completed)
			assert.GreaterOrEqual(t, res.P50, wait, "the orchestration waited")
			assert.Less(t, res.StepP50, res.P50-wait+time.Millisecond, "the step's latency leaves the wait out")
		})
	}
}

// TestASequenceRunAloneReportsWhatItsEarlyAndLateStepsCost: one
// orchestration at a time, the provider's spending is recorded at each
// step, and the cost of steps 2 to 11 and of the last ten is reported; run
// several at once, it cannot be told apart and is not reported.
func TestASequenceRunAloneReportsWhatItsEarlyAndLateStepsCost(t *testing.T) {
	res, err := Run(context.Background(), Config{Shape: ShapeSequence, Orchestrations: 2, MaxInFlight: 1, TasksPerInstance: 25}, Target{})
	require.NoError(t, err)
	require.Equal(t, 2, res.Completed)
	require.NotNil(t, res.EarlySteps)
	require.NotNil(t, res.LateSteps)
	assert.Equal(t, StepCost{From: 2, To: 11}, StepCost{From: res.EarlySteps.From, To: res.EarlySteps.To})
	assert.Equal(t, StepCost{From: 15, To: 24}, StepCost{From: res.LateSteps.From, To: res.LateSteps.To})
	for _, c := range []*StepCost{res.EarlySteps, res.LateSteps} {
		assert.GreaterOrEqual(t, c.Requests, 1.0, "a step is at least its activity's ack")
		assert.Positive(t, c.RU)
	}
	assert.Positive(t, res.StepP50)
	t.Logf("steps %d-%d: %.2f requests, %.1f RU; steps %d-%d: %.2f requests, %.1f RU; step p50 %s",
		res.EarlySteps.From, res.EarlySteps.To, res.EarlySteps.Requests, res.EarlySteps.RU,
		res.LateSteps.From, res.LateSteps.To, res.LateSteps.Requests, res.LateSteps.RU, res.StepP50)

	several, err := Run(context.Background(), Config{Shape: ShapeSequence, Orchestrations: 2, MaxInFlight: 2, TasksPerInstance: 25}, Target{})
	require.NoError(t, err)
	require.Equal(t, 2, several.Completed)
	assert.Nil(t, several.EarlySteps)
	assert.Nil(t, several.LateSteps)
}

// TestParseShapeNamesTheShapes: every shape reads back from its name, and
// an unknown one is refused with the list.
func TestParseShapeNamesTheShapes(t *testing.T) {
	for _, shape := range Shapes() {
		got, err := ParseShape(string(shape))
		require.NoError(t, err)
		assert.Equal(t, shape, got)
	}
	_, err := ParseShape("fan-out")
	assert.EqualError(t, err, `unknown shape "fan-out": one of fanout, sequence, timers, events, children`)
}
