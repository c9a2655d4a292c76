package cdb

// Version is this module's release, the one version a user sees: `cdb
// version` and `cdb --version` print it, CHANGELOG.md records what each
// release changed, and the module is tagged v<Version> when it is released.
// Versions follow semantic versioning; while the major version is 0 a minor
// release may change the API, and a patch release never does.
const Version = "0.1.0"
