package durable

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/google/uuid"

	"github.com/duroxide-go/cdb"
)

// ActivityFunc is an activity: ordinary code, run at least once per
// scheduling. It should stop when ctx is cancelled (its orchestration
// ended, or its lock was lost); a returned error fails the activity with
// that message, and with its type, code and marker when it is an
// *ApplicationError or of a type registered with RegisterError.
type ActivityFunc func(ctx ActivityContext, input string) (string, error)

// DefaultVersion is the version of orchestrations registered without one.
const DefaultVersion = "1.0.0"

// VersionPolicy picks the version of new executions started without an
// explicit version: the latest registered (the default), or an exact one.
type VersionPolicy struct {
	exact *cdb.SemanticVersion
}

// LatestVersion picks the highest registered version.
func LatestVersion() VersionPolicy { return VersionPolicy{} }

// ExactVersion pins new executions to version.
func ExactVersion(version string) (VersionPolicy, error) {
	v, err := cdb.ParseSemanticVersion(version)
	if err != nil {
		return VersionPolicy{}, fmt.Errorf("durable: exact version policy: %w", err)
	}
	return VersionPolicy{exact: &v}, nil
}

// Registry maps names to orchestrations (by semantic version) and
// activities. It is safe for concurrent use; registering while a runtime
// runs is allowed (work for a missing name waits with backoff, then fails
// with ErrNotRegistered: see Options.Unregistered). Every registry has
// duroxide's system activities.
type Registry struct {
	mu             sync.RWMutex
	orchestrations map[string][]versionedOrchestration // sorted by version, ascending
	policies       map[string]VersionPolicy
	activities     map[string]ActivityFunc
	errorTypes     map[string]reflect.Type // RegisterError, by type name
}

type versionedOrchestration struct {
	version cdb.SemanticVersion
	fn      OrchestrationFunc
}

// NewRegistry returns a registry holding only the system activities.
func NewRegistry() *Registry {
	r := &Registry{
		orchestrations: map[string][]versionedOrchestration{},
		policies:       map[string]VersionPolicy{},
		activities:     map[string]ActivityFunc{},
		errorTypes:     map[string]reflect.Type{},
	}
	r.activities[sysNewGUID] = syscallNewGUID
	r.activities[sysUtcNowMs] = syscallUtcNowMs
	r.activities[sysGetKVValue] = syscallGetKVValue
	return r
}

// RegisterOrchestration registers fn as version 1.0.0 of name.
func (r *Registry) RegisterOrchestration(name string, fn OrchestrationFunc) error {
	return r.RegisterOrchestrationVersion(name, DefaultVersion, fn)
}

// RegisterOrchestrationVersion registers fn as one version of name.
// Versions of a name must be registered in increasing order, as duroxide
// requires, so the latest is always the last registered.
func (r *Registry) RegisterOrchestrationVersion(name, version string, fn OrchestrationFunc) error {
	if name == "" || fn == nil {
		return fmt.Errorf("durable: register orchestration %q: %w: name and function are required", name, ErrInvalidInput)
	}
	v, err := cdb.ParseSemanticVersion(version)
	if err != nil {
		return fmt.Errorf("durable: register orchestration %q: %w", name, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	versions := r.orchestrations[name]
	if n := len(versions); n > 0 && !versions[n-1].version.Less(v) {
		return fmt.Errorf("durable: register orchestration %s@%s: versions must increase (latest is %s)", name, v, versions[n-1].version)
	}
	r.orchestrations[name] = append(versions, versionedOrchestration{version: v, fn: fn})
	return nil
}

// RegisterActivity registers an activity under name. Names starting with
// "__duroxide_syscall:" are reserved for the runtime's system activities
// (NewGUID, UtcNow, GetKVFromInstance).
func (r *Registry) RegisterActivity(name string, fn ActivityFunc) error {
	if name == "" || fn == nil {
		return fmt.Errorf("durable: register activity %q: %w: name and function are required", name, ErrInvalidInput)
	}
	if strings.HasPrefix(name, sysActivityPrefix) {
		return fmt.Errorf("durable: register activity %q: the %q prefix is reserved for system activities", name, sysActivityPrefix)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.activities[name]; dup {
		return fmt.Errorf("durable: register activity %q: already registered", name)
	}
	r.activities[name] = fn
	return nil
}

// SetVersionPolicy sets the policy for new executions of name.
func (r *Registry) SetVersionPolicy(name string, p VersionPolicy) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.policies[name] = p
}

// resolveOrchestration finds the handler of name: the exact version when
// one is given (an execution's recorded version, or a start's), the
// policy's otherwise. It returns the version that will run.
func (r *Registry) resolveOrchestration(name string, exact *string) (OrchestrationFunc, string, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	versions := r.orchestrations[name]
	want := r.policies[name].exact
	if exact != nil {
		v, err := cdb.ParseSemanticVersion(*exact)
		if err != nil {
			return nil, "", false
		}
		want = &v
	}
	if want == nil {
		if len(versions) == 0 {
			return nil, "", false
		}
		latest := versions[len(versions)-1]
		return latest.fn, latest.version.String(), true
	}
	i := slices.IndexFunc(versions, func(o versionedOrchestration) bool { return o.version.Compare(*want) == 0 })
	if i < 0 {
		return nil, "", false
	}
	return versions[i].fn, versions[i].version.String(), true
}

func (r *Registry) activity(name string) (ActivityFunc, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	fn, ok := r.activities[name]
	return fn, ok
}

// System activities (duroxide's __duroxide_syscall:*).

func syscallNewGUID(ActivityContext, string) (string, error) { return newGUID() }

func syscallUtcNowMs(ctx ActivityContext, _ string) (string, error) {
	return strconv.FormatInt(ctx.now().UnixMilli(), 10), nil
}

// syscallGetKVValue reads another instance's KV value; input and output are
// duroxide's JSON: {"instance_id":..,"key":..} and a JSON string or null.
func syscallGetKVValue(ctx ActivityContext, input string) (string, error) {
	var req struct {
		InstanceID string `json:"instance_id"`
		Key        string `json:"key"`
	}
	if err := json.Unmarshal([]byte(input), &req); err != nil {
		return "", fmt.Errorf("get_kv_value: bad input: %w", err)
	}
	v, found, err := ctx.Client().GetKVValue(ctx, req.InstanceID, req.Key)
	if err != nil {
		return "", err
	}
	if !found {
		return "null", nil
	}
	out, err := json.Marshal(v)
	return string(out), err
}

// newGUID returns a random (version 4) UUID.
func newGUID() (string, error) {
	id, err := uuid.NewRandom()
	if err != nil {
		return "", fmt.Errorf("new guid: %w", err)
	}
	return id.String(), nil
}
