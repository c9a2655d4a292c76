package fakecosmos

import (
	"fmt"
	"reflect"
	"slices"
)

// An index transformation: a real account applies a change to a
// container's indexing policy in the background, and reports how far it is
// in x-ms-documentdb-collection-index-transformation-progress on container
// reads. The fake applies a change at once (progress 100) unless a test
// holds the transformation with SetIndexTransformationProgress; while it is
// held below 100, the composite indexes the change added serve no ORDER BY.

const hdrIndexTransformationProgress = "x-ms-documentdb-collection-index-transformation-progress"

// SetIndexTransformationProgress holds the container's last indexing
// policy change at percent done (100 completes it).
func (s *Server) SetIndexTransformationProgress(database, containerID string, percent int) error {
	if percent < 0 || percent > 100 {
		return fmt.Errorf("fakecosmos: index transformation progress %d: want 0..100", percent)
	}
	c, err := s.lookupContainer(route{database: database, container: containerID})
	if err != nil {
		return fmt.Errorf("fakecosmos: index transformation of %s/%s: %w", database, containerID, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if percent == 100 {
		c.progress, c.added = nil, nil
		return nil
	}
	c.progress = &percent
	return nil
}

// transformProgress is the progress a container read reports. Call with
// c.mu held.
func (c *container) transformProgress() int {
	if c.progress == nil {
		return 100
	}
	return *c.progress
}

// building reports a composite index the held transformation has not
// built yet. Call with c.mu held.
func (c *container) building(ci []compositePath) bool {
	return c.progress != nil && slices.ContainsFunc(c.added, func(a []compositePath) bool { return reflect.DeepEqual(a, ci) })
}

// addedComposites are the composite indexes in next that before lacks.
func addedComposites(before, next [][]compositePath) [][]compositePath {
	var added [][]compositePath
	for _, ci := range next {
		if !slices.ContainsFunc(before, func(b []compositePath) bool { return reflect.DeepEqual(b, ci) }) {
			added = append(added, ci)
		}
	}
	return added
}
