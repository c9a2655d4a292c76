package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/duroxide-go/cdb"
)

// runVersion prints the version of the module cdb was built from (a tag
// when installed with go install ...@version, "(devel)" in a checkout),
// the provider's name and version, and the Go toolchain.
func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	module, version := "github.com/duroxide-go/cdb", "(unknown)"
	if info, ok := debug.ReadBuildInfo(); ok {
		module, version = info.Main.Path, info.Main.Version
		version += vcsSuffix(info.Settings)
	}
	fmt.Fprintf(stdout, "cdb %s\n", version)
	fmt.Fprintf(stdout, "module   %s %s\n", module, version)
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
