package cdb_test

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// publicPackages are the module's importable packages, by directory.
var publicPackages = []string{".", "providertest", "durable", "telemetrytest"}

// notShipped matches what a doc comment may not point to, because it does
// not ship with the module or means nothing without text that does not:
// design notes, the reference documents' sections, rule numbers, the seeds.
var notShipped = regexp.MustCompile(`DESIGN\.md|duroxide-contract\.md|cosmos-rest\.md|\breference\s+(§|[A-Z]\.\d)|§|\bR\d{1,2}\b|\bseeds?\b`)

// parsedPackage is one public package's non-test files.
type parsedPackage struct {
	dir   string
	files []*ast.File
	doc   *doc.Package
}

func parsePublicPackage(t *testing.T, dir string) parsedPackage {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, parser.ParseComments)
	require.NoError(t, err)
	require.Len(t, pkgs, 1, "one package in %s", dir)
	var p parsedPackage
	for _, pkg := range pkgs {
		p.dir = dir
		for _, f := range pkg.Files {
			p.files = append(p.files, f)
		}
		p.doc = doc.New(pkg, dir, doc.PreserveAST)
	}
	return p
}

// docPackages returns the packages the test covers. CDB_GODOC_PACKAGES (a
// comma-separated list of directories) narrows it while a package is being
// documented elsewhere.
func docPackages(t *testing.T) []parsedPackage {
	dirs := publicPackages
	if only := os.Getenv("CDB_GODOC_PACKAGES"); only != "" {
		dirs = strings.Split(only, ",")
	}
	var out []parsedPackage
	for _, dir := range dirs {
		out = append(out, parsePublicPackage(t, dir))
	}
	return out
}

// Every exported identifier of the public packages has a doc comment:
// types, functions, methods, constants, variables and interface methods (a
// constant or variable may be covered by its group's or its line's comment).
func TestEveryExportedIdentifierIsDocumented(t *testing.T) {
	for _, p := range docPackages(t) {
		t.Run(p.dir, func(t *testing.T) {
			assert.NotEmpty(t, strings.TrimSpace(p.doc.Doc), "package doc")
			for _, missing := range undocumented(p) {
				t.Errorf("%s: %s has no doc comment", p.dir, missing)
			}
		})
	}
}

func undocumented(p parsedPackage) []string {
	var missing []string
	checkValues := func(values []*doc.Value) {
		for _, v := range values {
			if strings.TrimSpace(v.Doc) != "" {
				continue
			}
			for _, spec := range v.Decl.Specs {
				vs := spec.(*ast.ValueSpec)
				if vs.Doc != nil || vs.Comment != nil {
					continue
				}
				for _, name := range vs.Names {
					if name.IsExported() {
						missing = append(missing, name.Name)
					}
				}
			}
		}
	}
	checkFuncs := func(prefix string, funcs []*doc.Func) {
		for _, f := range funcs {
			if strings.TrimSpace(f.Doc) == "" {
				missing = append(missing, prefix+f.Name)
			}
		}
	}
	checkValues(p.doc.Consts)
	checkValues(p.doc.Vars)
	checkFuncs("", p.doc.Funcs)
	for _, typ := range p.doc.Types {
		if strings.TrimSpace(typ.Doc) == "" {
			missing = append(missing, typ.Name)
		}
		checkValues(typ.Consts)
		checkValues(typ.Vars)
		checkFuncs("", typ.Funcs)
		checkFuncs(typ.Name+".", typ.Methods)
		missing = append(missing, undocumentedInterfaceMethods(typ)...)
	}
	return missing
}

// undocumentedInterfaceMethods lists an interface's exported methods
// without a comment. (Struct fields are left to judgement, as golint does;
// a field whose meaning its name and type do not carry has a comment.)
func undocumentedInterfaceMethods(typ *doc.Type) []string {
	var missing []string
	for _, spec := range typ.Decl.Specs {
		ts, ok := spec.(*ast.TypeSpec)
		if !ok || ts.Name.Name != typ.Name {
			continue
		}
		it, ok := ts.Type.(*ast.InterfaceType)
		if !ok {
			continue
		}
		for _, field := range it.Methods.List {
			if field.Doc != nil || field.Comment != nil {
				continue
			}
			for _, name := range field.Names {
				if name.IsExported() {
					missing = append(missing, typ.Name+"."+name.Name)
				}
			}
		}
	}
	return missing
}

// No doc comment points to what does not ship with the module.
func TestDocCommentsReferOnlyToWhatShips(t *testing.T) {
	for _, p := range docPackages(t) {
		t.Run(p.dir, func(t *testing.T) {
			for _, c := range exportedDocComments(p) {
				if m := notShipped.FindString(c.text); m != "" {
					t.Errorf("%s: the doc of %s refers to %q, which does not ship with the module:\n%s", p.dir, c.of, m, c.text)
				}
			}
		})
	}
}

type docComment struct{ of, text string }

// exportedDocComments collects the package doc and the comments of every
// exported declaration, field and interface method.
func exportedDocComments(p parsedPackage) []docComment {
	out := []docComment{{"the package", p.doc.Doc}}
	add := func(of string, groups ...*ast.CommentGroup) {
		for _, g := range groups {
			if g != nil {
				out = append(out, docComment{of, g.Text()})
			}
		}
	}
	for _, f := range p.files {
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Name.IsExported() {
					add(d.Name.Name, d.Doc)
				}
			case *ast.GenDecl:
				if declaresExported(d) {
					add("a declaration group", d.Doc)
				}
				for _, spec := range d.Specs {
					addSpecComments(spec, add)
				}
			}
		}
	}
	return out
}

func declaresExported(d *ast.GenDecl) bool {
	for _, spec := range d.Specs {
		switch s := spec.(type) {
		case *ast.ValueSpec:
			for _, name := range s.Names {
				if name.IsExported() {
					return true
				}
			}
		case *ast.TypeSpec:
			if s.Name.IsExported() {
				return true
			}
		}
	}
	return false
}

func addSpecComments(spec ast.Spec, add func(string, ...*ast.CommentGroup)) {
	switch s := spec.(type) {
	case *ast.ValueSpec:
		for _, name := range s.Names {
			if name.IsExported() {
				add(name.Name, s.Doc, s.Comment)
			}
		}
	case *ast.TypeSpec:
		if !s.Name.IsExported() {
			return
		}
		add(s.Name.Name, s.Doc, s.Comment)
		var fields *ast.FieldList
		switch t := s.Type.(type) {
		case *ast.StructType:
			fields = t.Fields
		case *ast.InterfaceType:
			fields = t.Methods
		}
		if fields == nil {
			return
		}
		for _, field := range fields.List {
			add(s.Name.Name+" member", field.Doc, field.Comment)
		}
	}
}

// codeName matches what reads as a Go identifier in prose: a word with an
// inner capital (NewProvider, ProviderAdmin) or a qualified name (cdb.X).
var codeName = regexp.MustCompile(`\b(?:[a-z]+\.)?[A-Z][a-z0-9]+[A-Z][A-Za-z0-9]*\b`)

// exampleFunc matches a function a package doc's example code declares.
var exampleFunc = regexp.MustCompile(`func (\w+)\(`)

// The package doc of each public package names only identifiers that
// exist in the module's public packages.
func TestPackageDocNamesOnlyWhatExists(t *testing.T) {
	known := map[string]bool{}
	for _, p := range docPackages(t) {
		for _, name := range exportedNames(p) {
			known[name] = true
		}
	}
	known["NoSQL"] = true         // the product: Azure Cosmos DB for NoSQL
	known["OpenTelemetry"] = true // the project otelcdb reports to
	for _, p := range docPackages(t) {
		t.Run(p.dir, func(t *testing.T) {
			declaredInExample := map[string]bool{}
			for _, m := range exampleFunc.FindAllStringSubmatch(p.doc.Doc, -1) {
				declaredInExample[m[1]] = true
			}
			for _, word := range codeName.FindAllString(p.doc.Doc, -1) {
				name := word[strings.LastIndex(word, ".")+1:]
				assert.True(t, known[name] || declaredInExample[name],
					"the package doc of %s names %s, which the module does not export", p.dir, word)
			}
		})
	}
}

// exportedNames lists a package's exported identifiers, methods and fields
// included.
func exportedNames(p parsedPackage) []string {
	var names []string
	values := func(vs []*doc.Value) {
		for _, v := range vs {
			names = append(names, v.Names...)
		}
	}
	values(p.doc.Consts)
	values(p.doc.Vars)
	for _, f := range p.doc.Funcs {
		names = append(names, f.Name)
	}
	for _, typ := range p.doc.Types {
		names = append(names, typ.Name)
		values(typ.Consts)
		values(typ.Vars)
		for _, f := range typ.Funcs {
			names = append(names, f.Name)
		}
		for _, m := range typ.Methods {
			names = append(names, m.Name)
		}
		for _, spec := range typ.Decl.Specs {
			if ts, ok := spec.(*ast.TypeSpec); ok {
				if st, ok := ts.Type.(*ast.StructType); ok {
					for _, field := range st.Fields.List {
						for _, n := range field.Names {
							names = append(names, n.Name)
						}
					}
				}
				if it, ok := ts.Type.(*ast.InterfaceType); ok {
					for _, m := range it.Methods.List {
						for _, n := range m.Names {
							names = append(names, n.Name)
						}
					}
				}
			}
		}
	}
	return names
}

// timestampName matches an integer field that holds a point in time.
var timestampName = regexp.MustCompile(`(Ms|At|Before|After|Until)$`)

// Every exported integer timestamp says its unit in its comment.
func TestTimestampsDocumentTheirUnit(t *testing.T) {
	for _, p := range docPackages(t) {
		t.Run(p.dir, func(t *testing.T) {
			for _, typ := range p.doc.Types {
				for _, field := range exportedIntegerFields(typ) {
					name := field.Names[0].Name
					if !timestampName.MatchString(name) {
						continue
					}
					text := field.Doc.Text() + field.Comment.Text()
					assert.Regexp(t, `(?i)(milli)?seconds`, text, "%s.%s does not say its unit", typ.Name, name)
				}
			}
		})
	}
}

func exportedIntegerFields(typ *doc.Type) []*ast.Field {
	var out []*ast.Field
	for _, spec := range typ.Decl.Specs {
		ts, ok := spec.(*ast.TypeSpec)
		if !ok {
			continue
		}
		st, ok := ts.Type.(*ast.StructType)
		if !ok {
			continue
		}
		for _, field := range st.Fields.List {
			fieldType := field.Type
			if star, ok := fieldType.(*ast.StarExpr); ok {
				fieldType = star.X
			}
			ident, ok := fieldType.(*ast.Ident)
			if !ok || !strings.Contains(ident.Name, "int") || len(field.Names) == 0 || !field.Names[0].IsExported() {
				continue
			}
			out = append(out, field)
		}
	}
	return out
}

// lowerInitialism matches a Go initialism spelled as a word (KvEntry, Id).
var lowerInitialism = regexp.MustCompile(`(Kv|Id|Json|Url|Http|Uuid|Ttl|Ru|Etag)([A-Z]|$)`)

// Exported names spell initialisms in Go style: KVEntry, InstanceID.
func TestExportedNamesSpellInitialismsInGoStyle(t *testing.T) {
	for _, p := range docPackages(t) {
		t.Run(p.dir, func(t *testing.T) {
			for _, name := range exportedNames(p) {
				assert.NotRegexp(t, lowerInitialism, name, "%s: use Go initialisms", name)
			}
		})
	}
}
