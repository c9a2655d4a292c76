package durable

import (
	"fmt"
	"strings"

	"github.com/duroxide-go/cdb"
)

// The "sub::" marker belongs to the child ids the runtime generates
// ("{parent}::sub::{event}", and "{parent}::sub::{execution}_{event}"
// after a continue-as-new). duroxide 0.1.30 reserves it, with two rules
// that answer two questions:
//
//   - A root id (a client start, a detached start) must not occupy a name
//     some future child will need. Generated child ids carry the marker
//     anywhere in the string, so a root id may neither start with "sub::"
//     nor contain "::sub::".
//   - An explicit child id only has to avoid the prefix: a leading "sub::"
//     is what tells the runtime to add the parent's id in front, so such an
//     id would not be used as given. The infix stays legal because the
//     runtime generates it itself (a grandchild of "root" is
//     "root::sub::2::sub::2").

// reservedInfix is the marker as it appears inside a generated child id.
const reservedInfix = "::" + cdb.SubOrchAutoPrefix

// checkRootInstanceID refuses a root instance id that uses the marker.
func checkRootInstanceID(instance string) error {
	switch {
	case strings.HasPrefix(instance, cdb.SubOrchAutoPrefix):
		return fmt.Errorf("%w: instance id %q starts with the reserved sub-orchestration marker %q",
			ErrInvalidInput, instance, cdb.SubOrchAutoPrefix)
	case strings.Contains(instance, reservedInfix):
		return fmt.Errorf("%w: instance id %q contains the reserved sub-orchestration marker %q",
			ErrInvalidInput, instance, reservedInfix)
	}
	return nil
}

// checkExplicitChildID refuses an explicit child id that starts with the
// marker ("" is no explicit id: the runtime generates one).
func checkExplicitChildID(instance string) error {
	if strings.HasPrefix(instance, cdb.SubOrchAutoPrefix) {
		return fmt.Errorf("%w: explicit child id %q starts with the reserved marker %q of generated child ids",
			ErrInvalidInput, instance, cdb.SubOrchAutoPrefix)
	}
	return nil
}
