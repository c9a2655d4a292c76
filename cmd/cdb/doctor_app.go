package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/duroxide-go/cdb"
)

// The step of `cdb doctor` (doctor.go) that checks the application's own
// container (-container or COSMOS_CONTAINER) as NewProvider does, without
// writing anything to it: a container NewProvider refuses fails here, with
// what to change; a missing one is reported, and never created.

// checkAppContainer reads the application's container and checks it as
// NewProvider checks an existing container.
func (d *doctor) checkAppContainer(ctx context.Context) stepOutcome {
	props, err := d.app.Read(ctx)
	if cdb.IsNotFound(err) {
		return d.missingAppContainer()
	}
	if err != nil {
		return failed(err, fmt.Sprintf("read container %q", d.app.ID()), "", "")
	}
	d.appProps = &props
	shown := fmt.Sprintf("container %q: %s", props.ID, describeContainer(props))
	if err := cdb.CheckProviderContainer(d.cfg.Database, props); err != nil {
		var mismatch *cdb.ContainerMismatchError
		if !errors.As(err, &mismatch) {
			return failed(err, shown, "", "")
		}
		return failed(nil, shown, fmt.Sprintf("NewProvider refuses container %q: the provider cannot run on it", props.ID),
			strings.Join(mismatch.Problems, "; ")+"; docs/real-account.md shows the definition it needs (az CLI, Bicep)")
	}
	var notes []string
	if paths := cdb.UnindexedProviderPaths(props.IndexingPolicy); len(paths) > 0 {
		notes = append(notes, fmt.Sprintf("NewProvider warns that its indexing policy leaves out %s, which the provider's queries filter on "+
			"(they cost more RU as the container fills: add them to its included paths)", strings.Join(paths, " ")))
	}
	if p := props.IndexTransformationProgress; p >= 0 && p < 100 {
		notes = append(notes, fmt.Sprintf("a change to its indexing policy is %d%% done", p))
	}
	detail := shown + ": NewProvider accepts it"
	if len(notes) > 0 {
		detail += "; " + strings.Join(notes, "; ")
	}
	return passed("%s", detail)
}

// missingAppContainer reports the application's container missing: what
// NewProvider will do about it, which is a metadata write that the
// bootstrap step showed this credential may or may not make.
func (d *doctor) missingAppContainer() stepOutcome {
	what := fmt.Sprintf("container %q not found in database %q", d.app.ID(), d.cfg.Database)
	if d.databaseMissing {
		what = fmt.Sprintf("database %q not found, nor container %q", d.cfg.Database, d.app.ID())
	}
	if d.metadataRefused {
		return failed(nil, what,
			"NewProvider would create it, but this credential may not create databases or containers (the bootstrap step's 403): NewProvider will fail",
			"create it with the definition in docs/real-account.md (az CLI or Bicep) and set Config.SkipBootstrap, "+
				"or check -container and -database ("+cdb.EnvContainer+", "+cdb.EnvDatabase+")")
	}
	return passed("%s: NewProvider will create it (a metadata write, which this credential may make: "+
		"the bootstrap step created the throw-away container); cdb doctor does not, check -container (%s) if you meant another",
		what, cdb.EnvContainer)
}
