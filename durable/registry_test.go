package durable

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

func orchReturning(s string) OrchestrationFunc {
	return func(*OrchestrationContext, string) (string, error) { return s, nil }
}

func resolvedOutput(t *testing.T, r *Registry, name string, exact *string) (string, string) {
	t.Helper()
	fn, version, ok := r.resolveOrchestration(name, exact)
	require.True(t, ok, "resolve %s", name)
	out, _ := fn(nil, "")
	return out, version
}

func TestRegistryResolvesLatestByDefault(t *testing.T) {
	r := NewRegistry()
	require.NoError(t, r.RegisterOrchestration("O", orchReturning("one")))
	require.NoError(t, r.RegisterOrchestrationVersion("O", "1.10.0", orchReturning("ten")))
	require.NoError(t, r.RegisterOrchestrationVersion("O", "2.0.0-beta.1", orchReturning("beta")))

	out, v := resolvedOutput(t, r, "O", nil)
	assert.Equal(t, "beta", out)
	assert.Equal(t, "2.0.0-beta.1", v)
	out, v = resolvedOutput(t, r, "O", ptr("1.10.0"))
	assert.Equal(t, "ten", out)
	assert.Equal(t, "1.10.0", v)

	_, _, ok := r.resolveOrchestration("O", ptr("3.0.0"))
	assert.False(t, ok, "an exact version must exist")
	_, _, ok = r.resolveOrchestration("Missing", nil)
	assert.False(t, ok)
}

func TestRegistryPolicyPinsNewExecutions(t *testing.T) {
	r := NewRegistry()
	require.NoError(t, r.RegisterOrchestration("O", orchReturning("v1")))
	require.NoError(t, r.RegisterOrchestrationVersion("O", "2.0.0", orchReturning("v2")))
	pin, err := ExactVersion("1.0.0")
	require.NoError(t, err)
	r.SetVersionPolicy("O", pin)
	out, _ := resolvedOutput(t, r, "O", nil)
	assert.Equal(t, "v1", out)
	out, _ = resolvedOutput(t, r, "O", ptr("2.0.0"))
	assert.Equal(t, "v2", out, "an explicit version beats the policy")
	r.SetVersionPolicy("O", LatestVersion())
	out, _ = resolvedOutput(t, r, "O", nil)
	assert.Equal(t, "v2", out)

	_, err = ExactVersion("v1")
	assert.ErrorIs(t, err, cdb.ErrInvalidSemanticVersion)
}

func TestRegistryRejectsBadRegistrations(t *testing.T) {
	r := NewRegistry()
	require.NoError(t, r.RegisterOrchestrationVersion("O", "2.0.0", orchReturning("")))
	assert.ErrorContains(t, r.RegisterOrchestrationVersion("O", "1.0.0", orchReturning("")), "versions must increase")
	assert.ErrorContains(t, r.RegisterOrchestrationVersion("O", "2.0.0", orchReturning("")), "versions must increase")
	assert.ErrorIs(t, r.RegisterOrchestrationVersion("O", "three", orchReturning("")), cdb.ErrInvalidSemanticVersion)
	assert.ErrorIs(t, r.RegisterOrchestration("", orchReturning("")), ErrInvalidInput)

	act := func(ActivityContext, string) (string, error) { return "", nil }
	require.NoError(t, r.RegisterActivity("A", act))
	assert.ErrorContains(t, r.RegisterActivity("A", act), "already registered")
	assert.ErrorContains(t, r.RegisterActivity(sysNewGUID, act), "reserved")
}

func TestRegistryHasSystemActivities(t *testing.T) {
	r := NewRegistry()
	for _, name := range []string{sysNewGUID, sysUtcNowMs, sysGetKVValue} {
		_, ok := r.activity(name)
		assert.True(t, ok, name)
	}
	guid, err := newGUID()
	require.NoError(t, err)
	assert.Regexp(t, regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`), guid)
}

// NewGUID is random when first called and the recorded value on every
// replay: the timer makes a second turn replay the first GUID, and the
// output must carry the value history holds, not a fresh one.
func TestNewGUIDIsReplayedFromHistory(t *testing.T) {
	eachProvider(t, func(t *testing.T, h *harness) {
		h.orchestration("Guids", func(ctx *OrchestrationContext, _ string) (string, error) {
			first, err := ctx.NewGUID()
			if err != nil {
				return "", err
			}
			if _, err := ctx.ScheduleTimer(time.Millisecond).Await(); err != nil {
				return "", err
			}
			second, err := ctx.NewGUID()
			if err != nil {
				return "", err
			}
			return first + " " + second, nil
		})
		h.run()
		h.start("guids", "Guids", "")
		first, second, _ := strings.Cut(h.completed("guids"), " ")

		history := h.waitForHistory("guids", func([]cdb.Event) bool { return true })
		var recorded []string
		for _, c := range eventsOf[cdb.ActivityCompleted](history) {
			recorded = append(recorded, c.Result)
		}
		assert.Equal(t, []string{first, second}, recorded, "the output holds the GUIDs history recorded")
		assert.NotEqual(t, first, second)
	})
}
