package cdb_test

import (
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The Markdown files ship with the module (go get brings them), so every
// reference in them must resolve inside it: a relative link names a file of
// the repository and, with a fragment, a heading of that file; no text points
// outside the module's root (../) or at the design notes it was written from,
// which do not ship.

var (
	markdownLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// notShippedReference is what a reader of a module download cannot follow.
	notShippedReference = regexp.MustCompile(`\.\./shared|DESIGN\.md|duroxide-contract\.md|cosmos-rest\.md|cosmos-ru-model\.md|cosmos-real-account-risks\.md`)
	fencedCode          = regexp.MustCompile("(?s)```.*?```")
)

func TestMarkdownReferencesResolveInsideTheRepository(t *testing.T) {
	files := shippedMarkdown(t)
	require.Contains(t, files, "README.md")
	for _, file := range files {
		text := readText(t, file)
		for _, ref := range notShippedReference.FindAllString(text, -1) {
			t.Errorf("%s mentions %q, which does not ship with the module", file, ref)
		}
		for _, m := range markdownLink.FindAllStringSubmatch(fencedCode.ReplaceAllString(text, ""), -1) {
			checkLink(t, file, m[1])
		}
	}
}

func TestMarkdownLinkCheckerRefusesWhatDoesNotResolve(t *testing.T) {
	dir := t.TempDir()
	doc := filepath.Join(dir, "doc.md")
	require.NoError(t, os.WriteFile(doc, []byte("# Title\n\n## Sizing the container\n"), 0o644))
	for link, want := range map[string]string{
		"doc.md":                       "",
		"doc.md#sizing-the-container":  "",
		"#title":                       "",
		"missing.md":                   "does not exist",
		"doc.md#nowhere":               "no heading",
		"../outside.md":                "leaves the repository",
		"https://example.com/anything": "",
	} {
		got := linkProblem(dir, doc, link)
		if want == "" {
			assert.Empty(t, got, link)
		} else {
			assert.Contains(t, got, want, link)
		}
	}
}

func checkLink(t *testing.T, file, link string) {
	t.Helper()
	root, err := os.Getwd()
	require.NoError(t, err)
	if problem := linkProblem(root, filepath.Join(root, file), link); problem != "" {
		t.Errorf("%s: link %q %s", file, link, problem)
	}
}

// linkProblem says why link, written in the Markdown file doc under root,
// does not resolve, or returns "" when it does. Links with a scheme are
// left to the web.
func linkProblem(root, doc, link string) string {
	if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
		return ""
	}
	target, fragment, _ := strings.Cut(link, "#")
	file := doc
	if target != "" {
		file = filepath.Join(filepath.Dir(doc), filepath.FromSlash(target))
		if rel, err := filepath.Rel(root, file); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return "leaves the repository"
		}
		if _, err := os.Stat(file); err != nil {
			return "names a file that does not exist"
		}
	}
	if fragment == "" || path.Ext(file) != ".md" {
		return ""
	}
	text, err := os.ReadFile(file)
	if err != nil {
		return "names a file that cannot be read"
	}
	for _, anchor := range headingAnchors(string(text)) {
		if anchor == fragment {
			return ""
		}
	}
	return "names no heading of " + filepath.Base(file)
}

var headingLine = regexp.MustCompile(`(?m)^#{1,6}[ \t]+(.+?)[ \t]*$`)

// headingAnchors are the fragments a Markdown renderer gives the headings
// outside code blocks: lower case, spaces to dashes, punctuation dropped.
func headingAnchors(text string) []string {
	var anchors []string
	for _, m := range headingLine.FindAllStringSubmatch(fencedCode.ReplaceAllString(text, ""), -1) {
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || ('a' <= r && r <= 'z') || ('0' <= r && r <= '9') || r > 127:
				b.WriteRune(r)
			}
		}
		anchors = append(anchors, b.String())
	}
	return anchors
}

// shippedMarkdown lists the repository's Markdown files, leaving out the
// installed tools and npm packages.
func shippedMarkdown(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".tools" || d.Name() == "node_modules" || d.Name() == ".git") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			files = append(files, filepath.ToSlash(p))
		}
		return nil
	})
	require.NoError(t, err)
	return files
}

func readText(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	return string(b)
}
