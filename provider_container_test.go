package cdb_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/internal/hostspeed"
	"github.com/duroxide-go/cdb/providertest"
)

func containerTestContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), hostspeed.Scale(time.Minute))
	t.Cleanup(cancel)
	return ctx
}

// createContainer creates database db and container coll on acct with props
// as given, as an administrator (or a script) would before the application
// starts.
func createContainer(t *testing.T, acct *cdb.FakeAccount, db, coll string, props cdb.ContainerProperties) {
	t.Helper()
	ctx := containerTestContext(t)
	c := acct.Client()
	require.NoError(t, c.EnsureDatabase(ctx, db))
	cc, err := c.NewContainer(db, coll)
	require.NoError(t, err)
	props.ID = coll
	_, err = cc.Create(ctx, props)
	require.NoError(t, err)
}

func TestNewProviderSkipBootstrapNamesTheMissingDatabase(t *testing.T) {
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	_, err := cdb.NewProvider(containerTestContext(t), cdb.Config{Client: acct.Client(), Database: "shop", Container: "orders", SkipBootstrap: true})
	require.Error(t, err)
	assert.ErrorContains(t, err, `database "shop" not found`)
	assert.NotContains(t, err.Error(), `container "orders"`, "the container is not what is missing")
	assert.True(t, cdb.IsNotFound(err), "the service's 404 is kept: %v", err)
}

func TestNewProviderSkipBootstrapNamesTheMissingContainer(t *testing.T) {
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	ctx := containerTestContext(t)
	p, err := cdb.NewProvider(ctx, cdb.Config{Client: acct.Client(), Database: "shop", Container: "orders"})
	require.NoError(t, err)
	require.NoError(t, p.Container().Delete(ctx))
	require.NoError(t, p.Close())

	_, err = cdb.NewProvider(ctx, cdb.Config{Client: acct.Client(), Database: "shop", Container: "orders", SkipBootstrap: true})
	require.Error(t, err)
	assert.ErrorContains(t, err, `container "orders" in database "shop" not found`)
	assert.True(t, cdb.IsNotFound(err), "the service's 404 is kept: %v", err)
}

// providerProperties is ProviderContainerProperties("orders") with change
// applied to a copy.
func providerProperties(change func(*cdb.ContainerProperties)) cdb.ContainerProperties {
	props := cdb.ProviderContainerProperties("orders")
	policy := *props.IndexingPolicy
	policy.CompositeIndexes = append([][]cdb.CompositeIndex(nil), policy.CompositeIndexes...)
	props.IndexingPolicy = &policy
	change(&props)
	return props
}

func ttl(seconds int) *int { return &seconds }

// Each way an existing container can differ from what the provider needs is
// refused at startup, whether NewProvider found it while bootstrapping or
// was told not to bootstrap, with an error that names the difference.
func TestNewProviderRefusesAContainerItCannotUse(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*cdb.ContainerProperties)
		want   []string
	}{
		{"partition key", func(p *cdb.ContainerProperties) { p.PartitionKey.Paths = []string{"/id"} },
			[]string{`partition key path is /id`, `must be /pk`}},
		{"no composite index", func(p *cdb.ContainerProperties) { p.IndexingPolicy.CompositeIndexes = nil },
			[]string{"composite index", "(/type ascending, /visibleAt ascending, /seq ascending)"}},
		{"composite index in the other order", func(p *cdb.ContainerProperties) {
			p.IndexingPolicy.CompositeIndexes = [][]cdb.CompositeIndex{{{Path: "/seq", Order: "ascending"}, {Path: "/visibleAt", Order: "ascending"}}}
		}, []string{"composite index", "(/type ascending, /visibleAt ascending, /seq ascending)"}},
		{"composite index with mixed directions", func(p *cdb.ContainerProperties) {
			p.IndexingPolicy.CompositeIndexes = [][]cdb.CompositeIndex{{{Path: "/visibleAt", Order: "ascending"}, {Path: "/seq", Order: "descending"}}}
		}, []string{"composite index"}},
		{"indexing off", func(p *cdb.ContainerProperties) {
			p.IndexingPolicy = &cdb.IndexingPolicy{IndexingMode: cdb.IndexingModeNone}
		}, []string{`indexing mode is "none"`}},
		{"time to live off", func(p *cdb.ContainerProperties) { p.DefaultTimeToLive = nil },
			[]string{"time to live is off", "defaultTtl -1"}},
		{"a default time to live", func(p *cdb.ContainerProperties) { p.DefaultTimeToLive = ttl(3600) },
			[]string{"default time to live is 3600 seconds", "defaultTtl -1"}},
	} {
		for _, skip := range []bool{false, true} {
			name := tc.name + "/bootstrap"
			if skip {
				name = tc.name + "/skip bootstrap"
			}
			t.Run(name, func(t *testing.T) {
				acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
				createContainer(t, acct, "shop", "orders", providerProperties(tc.change))
				_, err := cdb.NewProvider(containerTestContext(t), cdb.Config{Client: acct.Client(), Database: "shop", Container: "orders", SkipBootstrap: skip})
				require.Error(t, err)
				var mismatch *cdb.ContainerMismatchError
				require.True(t, errors.As(err, &mismatch), "a *ContainerMismatchError: %v", err)
				assert.Equal(t, "shop", mismatch.Database)
				assert.Equal(t, "orders", mismatch.Container)
				assert.Len(t, mismatch.Problems, 1, "only what differs: %v", mismatch.Problems)
				for _, want := range tc.want {
					assert.ErrorContains(t, err, want)
				}
				assert.ErrorContains(t, err, "docs/real-account.md", "the error says where the definition is")
			})
		}
	}
}

func TestNewProviderNamesEveryDifferenceAtOnce(t *testing.T) {
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	createContainer(t, acct, "shop", "orders", cdb.ContainerProperties{PartitionKey: cdb.PartitionKeyDefinition{Paths: []string{"/customer"}}})
	_, err := cdb.NewProvider(containerTestContext(t), cdb.Config{Client: acct.Client(), Database: "shop", Container: "orders", SkipBootstrap: true})
	var mismatch *cdb.ContainerMismatchError
	require.True(t, errors.As(err, &mismatch), "a *ContainerMismatchError: %v", err)
	assert.Len(t, mismatch.Problems, 3, "partition key, composite index, time to live: %v", mismatch.Problems)
	assert.ErrorIs(t, err, cdb.ErrPartitionKeyPathMismatch)
}

// The check asks for what the provider's queries and documents need, no
// more: extra indexes, other excluded paths and a composite index served in
// the inverted direction are fine.
func TestNewProviderAcceptsAContainerWithMoreThanItNeeds(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*cdb.ContainerProperties)
	}{
		{"as the provider creates it", func(*cdb.ContainerProperties) {}},
		{"as earlier versions created it: every path but the blobs", earlierVersionsIndexing},
		{"everything indexed, extra composite indexes", func(p *cdb.ContainerProperties) {
			p.IndexingPolicy.IncludedPaths = []cdb.IncludedPath{{Path: "/*"}}
			p.IndexingPolicy.ExcludedPaths = nil
			p.IndexingPolicy.CompositeIndexes = append([][]cdb.CompositeIndex{
				{{Path: "/instance", Order: "ascending"}, {Path: "/seq", Order: "descending"}},
			}, p.IndexingPolicy.CompositeIndexes...)
		}},
		{"composite index order left out (ascending)", func(p *cdb.ContainerProperties) {
			p.IndexingPolicy.CompositeIndexes = [][]cdb.CompositeIndex{{{Path: "/visibleAt"}, {Path: "/seq"}}}
		}},
		{"composite index inverted", func(p *cdb.ContainerProperties) {
			p.IndexingPolicy.CompositeIndexes = [][]cdb.CompositeIndex{{{Path: "/visibleAt", Order: "descending"}, {Path: "/seq", Order: "descending"}}}
		}},
	} {
		for _, skip := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/skip bootstrap %t", tc.name, skip), func(t *testing.T) {
				acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
				createContainer(t, acct, "shop", "orders", providerProperties(tc.change))
				ctx := containerTestContext(t)
				p, err := cdb.NewProvider(ctx, cdb.Config{Client: acct.Client(), Database: "shop", Container: "orders", SkipBootstrap: skip, ShortPolling: true})
				require.NoError(t, err)
				defer p.Close()
				// The candidate query's ORDER BY is served.
				require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem("i1"), 0))
				item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
				require.NoError(t, err)
				assert.NotNil(t, item)
			})
		}
	}
}

// earlierVersionsIndexing is the opt-out policy the provider made its
// containers with before it indexed only what its queries filter on.
func earlierVersionsIndexing(p *cdb.ContainerProperties) {
	p.IndexingPolicy.IncludedPaths = []cdb.IncludedPath{{Path: "/*"}}
	p.IndexingPolicy.ExcludedPaths = nil
	for _, path := range []string{`/"_etag"/?`, "/item/?", "/data/?", "/entries/*", "/output/?", "/customStatus/?", "/trace/*", "/orch/?"} {
		p.IndexingPolicy.ExcludedPaths = append(p.IndexingPolicy.ExcludedPaths, cdb.ExcludedPath{Path: path})
	}
}

// A container whose indexing policy leaves out a property the provider's
// queries filter on is served (the queries still answer), and NewProvider
// warns, naming the paths to add: an operator's own policy, or one made
// before a version that filters on a new property.
func TestAContainerWhoseIndexLeavesOutAFilteredPropertyIsServedWithAWarning(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*cdb.ContainerProperties)
		want   string // the paths the warning names; "" for no warning
	}{
		{"as the provider creates it", func(*cdb.ContainerProperties) {}, ""},
		{"as earlier versions created it", earlierVersionsIndexing, ""},
		{"opt-in, without /slot/?", func(p *cdb.ContainerProperties) {
			p.IndexingPolicy.IncludedPaths = slices.DeleteFunc(p.IndexingPolicy.IncludedPaths, func(ip cdb.IncludedPath) bool { return ip.Path == "/slot/?" })
		}, "/slot/?"},
		{"opt-out, excluding /status/? and /parent/*", func(p *cdb.ContainerProperties) {
			earlierVersionsIndexing(p)
			p.IndexingPolicy.ExcludedPaths = append(p.IndexingPolicy.ExcludedPaths, cdb.ExcludedPath{Path: "/status/?"}, cdb.ExcludedPath{Path: "/parent/*"})
		}, "/status/? /parent/?"},
		{"a more precise include wins over an excluded parent", func(p *cdb.ContainerProperties) {
			p.IndexingPolicy.IncludedPaths = []cdb.IncludedPath{{Path: "/*"}, {Path: "/slot/?"}}
			p.IndexingPolicy.ExcludedPaths = []cdb.ExcludedPath{{Path: "/slot/*"}}
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
			createContainer(t, acct, "shop", "orders", providerProperties(tc.change))
			ctx := containerTestContext(t)
			var logs bytes.Buffer
			p, err := cdb.NewProvider(ctx, cdb.Config{Client: acct.Client(), Database: "shop", Container: "orders", ShortPolling: true,
				Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
			require.NoError(t, err)
			defer p.Close()
			require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem("i1"), 0))
			item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
			require.NoError(t, err)
			assert.NotNil(t, item, "served")

			var warned []string
			for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
				var entry struct{ Msg, Paths string }
				if json.Unmarshal([]byte(line), &entry) == nil && strings.Contains(entry.Msg, "indexing policy leaves out") {
					warned = append(warned, entry.Paths)
				}
			}
			if tc.want == "" {
				assert.Empty(t, warned)
			} else {
				assert.Equal(t, []string{tc.want}, warned)
			}
		})
	}
}

// An Entra ID data-plane role cannot create databases or containers (403):
// the error says what to do instead.
func TestNewProviderForbiddenBootstrapPointsToSkipBootstrap(t *testing.T) {
	for _, op := range []string{"CreateDatabase", "CreateContainer"} {
		t.Run(op, func(t *testing.T) {
			acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
			acct.InjectFault(cdb.FakeFault{Match: func(r cdb.FakeRequest) bool { return r.Operation == op }, Status: http.StatusForbidden})
			_, err := cdb.NewProvider(containerTestContext(t), cdb.Config{Client: acct.Client(), Database: "shop", Container: "orders"})
			require.Error(t, err)
			assert.ErrorContains(t, err, "Config.SkipBootstrap")
			assert.ErrorContains(t, err, "docs/real-account.md")
		})
	}
}

// An account that forbids metadata writes with its keys
// (disableKeyBasedMetadataWriteAccess) refuses to create a database or a
// container that exists already. The provider reads first, and opens what is
// there without writing metadata.
func TestNewProviderOpensWhatExistsOnAnAccountThatForbidsMetadataWrites(t *testing.T) {
	ctx := containerTestContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	createContainer(t, acct, "shop", "orders", cdb.ProviderContainerProperties("orders"))
	acct.ForbidMetadataWrites(true)
	log := logRequests(acct)
	p, err := cdb.NewProvider(ctx, cdb.Config{Client: acct.Client(), Database: "shop", Container: "orders", ShortPolling: true})
	require.NoError(t, err)
	defer p.Close()
	for _, op := range log.ops() {
		assert.NotContains(t, []string{"CreateDatabase", "CreateContainer"}, op, "nothing that exists is created again")
	}
	providertest.CreateInstance(ctx, t, p, "opened")
}

// Where the container is missing on such an account, the error says why
// the create was refused and what to do.
func TestNewProviderExplainsAnAccountThatForbidsMetadataWrites(t *testing.T) {
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	acct.ForbidMetadataWrites(true)
	_, err := cdb.NewProvider(containerTestContext(t), cdb.Config{Client: acct.Client(), Database: "shop", Container: "orders"})
	require.Error(t, err)
	assert.True(t, cdb.HasStatus(err, http.StatusForbidden), "%v", err)
	assert.ErrorContains(t, err, "cdb: bootstrap: create database \"shop\"")
	assert.ErrorContains(t, err, "disableKeyBasedMetadataWriteAccess")
	assert.ErrorContains(t, err, "Config.SkipBootstrap")
}

// A real account answers 404/1003 (owner resource not found) for a moment
// after a container is created. NewProvider waits that out, so the
// provider's first writes do not read it as "not found".
func TestNewProviderWaitsUntilANewContainerServes(t *testing.T) {
	ctx := containerTestContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{NewContainerWarmUp: 12})
	p, err := cdb.NewProvider(ctx, cdb.Config{Client: acct.Client(), Database: "shop", Container: "orders", ShortPolling: true})
	require.NoError(t, err)
	defer p.Close()
	require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem("first"), 0))
	item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	assert.Equal(t, "first", item.Instance)
}

// An operator adds (type, visibleAt, seq) to a container of an earlier
// version, and the service builds it in the background, during which it
// serves no ORDER BY. The queues keep the earlier order until the container
// reports the build done, then switch.
func TestTheQueuesKeepTheEarlierOrderUntilTheNewIndexIsBuilt(t *testing.T) {
	ctx := containerTestContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	legacy := [][]cdb.CompositeIndex{{{Path: "/visibleAt", Order: "ascending"}, {Path: "/seq", Order: "ascending"}}}
	createContainer(t, acct, "shop", "orders", providerProperties(func(p *cdb.ContainerProperties) {
		p.IndexingPolicy.CompositeIndexes = legacy
	}))
	cc, err := acct.Client().NewContainer("shop", "orders")
	require.NoError(t, err)
	_, err = cc.Replace(ctx, providerProperties(func(p *cdb.ContainerProperties) {
		p.IndexingPolicy.CompositeIndexes = append(p.IndexingPolicy.CompositeIndexes, legacy...)
	}))
	require.NoError(t, err)
	require.NoError(t, acct.SetIndexTransformationProgress("shop", "orders", 40))
	props, err := cc.Read(ctx)
	require.NoError(t, err)
	require.Equal(t, 40, props.IndexTransformationProgress)

	p, err := cdb.NewProvider(ctx, cdb.Config{Client: acct.Client(), Database: "shop", Container: "orders", ShortPolling: true})
	require.NoError(t, err)
	defer p.Close()
	assert.Equal(t, " ORDER BY c.visibleAt ASC, c.seq ASC", cdb.QueueOrderByForTest(p))
	require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem("during"), 0))
	item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err, "the queue is served while the new index is built")
	require.NotNil(t, item)
	assert.False(t, cdb.CheckIndexUpgradeForTest(ctx, p), "not while the build runs")

	require.NoError(t, acct.SetIndexTransformationProgress("shop", "orders", 100))
	assert.True(t, cdb.CheckIndexUpgradeForTest(ctx, p))
	assert.Equal(t, " ORDER BY c.type ASC, c.visibleAt ASC, c.seq ASC", cdb.QueueOrderByForTest(p))
	require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem("after"), 0))
	item, _, _, err = p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	assert.Equal(t, "after", item.Instance)
}

// A container made by an earlier version, whose composite index is
// (visibleAt, seq) only, is still served: the queue queries order by what
// it has.
func TestAContainerWithTheEarlierQueueIndexIsServed(t *testing.T) {
	ctx := containerTestContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	createContainer(t, acct, "shop", "orders", providerProperties(func(p *cdb.ContainerProperties) {
		p.IndexingPolicy.CompositeIndexes = [][]cdb.CompositeIndex{{{Path: "/visibleAt", Order: "ascending"}, {Path: "/seq", Order: "ascending"}}}
	}))
	p, err := cdb.NewProvider(ctx, cdb.Config{Client: acct.Client(), Database: "shop", Container: "orders", ShortPolling: true})
	require.NoError(t, err)
	defer p.Close()
	providertest.CreateInstance(ctx, t, p, "legacy")
	require.NoError(t, p.EnqueueForWorker(ctx, cdb.ActivityExecuteMessage{Instance: "legacy", ExecutionID: 1, ID: 2, Name: "Work", Input: "{}"}))
	item, _, _, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, cdb.DefaultOnlyFilter())
	require.NoError(t, err)
	require.NotNil(t, item, "the worker queue is served by the earlier index")
}

// CheckProviderContainer is NewProvider's check without a provider: the
// same refusal for a container NewProvider refuses, nil for its own
// definition, and the paths NewProvider warns about.
func TestCheckProviderContainerRefusesWhatNewProviderRefuses(t *testing.T) {
	assert.NoError(t, cdb.CheckProviderContainer("shop", cdb.ProviderContainerProperties("orders")))
	assert.Empty(t, cdb.UnindexedProviderPaths(cdb.ProviderContainerProperties("orders").IndexingPolicy))

	byID := providerProperties(func(p *cdb.ContainerProperties) { p.PartitionKey.Paths = []string{"/id"} })
	byID.ID = "orders"
	err := cdb.CheckProviderContainer("shop", byID)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	createContainer(t, acct, "shop", "orders", byID)
	_, opened := cdb.NewProvider(containerTestContext(t), cdb.Config{Client: acct.Client(), Database: "shop", Container: "orders", SkipBootstrap: true})
	require.Error(t, opened)
	assert.EqualError(t, err, opened.Error())
	assert.ErrorIs(t, err, cdb.ErrPartitionKeyPathMismatch)

	everything := cdb.DefaultIndexingPolicy()
	assert.Empty(t, cdb.UnindexedProviderPaths(&everything), "the default policy indexes every path")
	assert.Contains(t, cdb.UnindexedProviderPaths(&cdb.IndexingPolicy{IncludedPaths: []cdb.IncludedPath{{Path: "/type/?"}}, ExcludedPaths: []cdb.ExcludedPath{{Path: "/*"}}}), "/visibleAt/?")
}
