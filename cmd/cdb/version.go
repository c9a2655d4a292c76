package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/duroxide-go/cdb"
)

// runVersion prints the release (cdb.Version), then what the build knows:
// the module it was built from (a tag when installed with go install
// ...@version, "(devel)" and the commit in a checkout), the provider's name
// and version, and the Go toolchain.
func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	module, build := "github.com/duroxide-go/cdb", "(unknown)"
	if info, ok := debug.ReadBuildInfo(); ok {
		module, build = info.Main.Path, info.Main.Version
		build += vcsSuffix(info.Settings)
	}
	fmt.Fprintf(stdout, "cdb %s\n", cdb.Version)
	fmt.Fprintf(stdout, "module   %s %s\n", module, build)
	fmt.Fprintf(stdout, "provider %s %s\n", cdb.ProviderName, cdb.ProviderVersion)
	fmt.Fprintf(stdout, "go       %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return nil
}

// vcsSuffix names the commit a checkout build came from, when the build
// recorded it.
func vcsSuffix(settings []debug.BuildSetting) string {
	var revision, modified string
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if revision == "" {
		return ""
	}
	if len(revision) > 12 {
		revision = revision[:12]
	}
	if modified == "true" {
		revision += "+dirty"
	}
	return "-" + revision
}
