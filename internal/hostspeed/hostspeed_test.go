package hostspeed

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestSlownessIsBetweenOneAndMaxAndScaleFollowsIt(t *testing.T) {
	t.Setenv(EnvSlowness, "")
	s := Slowness()
	t.Logf("calibration %v, tuned on %v: slowness %.2f", Calibrate(), tunedOn(), s)
	assert.GreaterOrEqual(t, s, 1.0)
	assert.LessOrEqual(t, s, float64(Max))
	assert.GreaterOrEqual(t, Scale(time.Second), time.Second)
	assert.GreaterOrEqual(t, Slowness(), s, "the value never shrinks within a process")
}

func TestTheEnvironmentOverridesTheMeasurement(t *testing.T) {
	t.Setenv(EnvSlowness, "3")
	assert.Equal(t, 3.0, Slowness())
	assert.Equal(t, 3*time.Second, Scale(time.Second))

	t.Setenv(EnvSlowness, "0.5")
	assert.Equal(t, 1.0, Slowness(), "never below 1: a test's timings never shrink")
	t.Setenv(EnvSlowness, "1000")
	assert.Equal(t, float64(Max), Slowness())
}

func TestCalibrateMeasuresTheWorkItDoes(t *testing.T) {
	assert.Positive(t, CalibrateOnce(1))
	assert.Positive(t, Calibrate())
}
