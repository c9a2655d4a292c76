package durable

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"regexp"
	"strings"
	"testing"
)

// notInTheModule matches what a doc comment may not point to: files and
// rules that do not ship with the module (the design notes, the contract
// reference, rule numbers, source file names).
var notInTheModule = regexp.MustCompile(`DESIGN|ARCHITECTURE|reference [A-Z]\.|contract §|§|\bR[0-9]+\b|\b[a-z_]+\.go\b`)

// TestGodocDocumentsEveryExportedIdentifier reads the package as godoc
// does: every exported identifier (types, functions, methods, constants,
// variables, struct fields) has a doc comment, and no doc comment refers to
// something a user of the module cannot read.
func TestGodocDocumentsEveryExportedIdentifier(t *testing.T) {
	pkg := parsePackageDoc(t)
	check := func(name, text string) {
		t.Helper()
		if strings.TrimSpace(text) == "" {
			t.Errorf("%s has no doc comment", name)
		}
		if m := notInTheModule.FindString(text); m != "" {
			t.Errorf("the doc of %s refers to %q, which does not ship with the module", name, m)
		}
	}
	check("package durable", pkg.Doc)
	checkValues(pkg.Consts, check)
	checkValues(pkg.Vars, check)
	for _, f := range pkg.Funcs {
		check(f.Name, f.Doc)
	}
	for _, ty := range pkg.Types {
		check(ty.Name, ty.Doc)
		checkFields(ty, check)
		checkValues(ty.Consts, check)
		checkValues(ty.Vars, check)
		for _, f := range ty.Funcs {
			check(f.Name, f.Doc)
		}
		for _, m := range ty.Methods {
			check(ty.Name+"."+m.Name, m.Doc)
		}
	}
}

func parsePackageDoc(t *testing.T) *doc.Package {
	t.Helper()
	fset := token.NewFileSet()
	notTest := func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }
	pkgs, err := parser.ParseDir(fset, ".", notTest, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	files := make([]*ast.File, 0, len(pkgs["durable"].Files))
	for _, f := range pkgs["durable"].Files {
		files = append(files, f)
	}
	pkg, err := doc.NewFromFiles(fset, files, "github.com/duroxide-go/cdb/durable")
	if err != nil {
		t.Fatal(err)
	}
	return pkg
}

// checkValues checks each exported constant or variable: its own comment,
// or the comment of its group.
func checkValues(values []*doc.Value, check func(name, text string)) {
	for _, v := range values {
		for _, spec := range v.Decl.Specs {
			vs := spec.(*ast.ValueSpec)
			for _, n := range vs.Names {
				if n.IsExported() {
					check(n.Name, v.Doc+vs.Doc.Text()+vs.Comment.Text())
				}
			}
		}
	}
}

// checkFields checks the exported fields of an exported struct: a doc or
// line comment of their own.
func checkFields(ty *doc.Type, check func(name, text string)) {
	for _, spec := range ty.Decl.Specs {
		st, ok := spec.(*ast.TypeSpec).Type.(*ast.StructType)
		if !ok {
			continue
		}
		for _, field := range st.Fields.List {
			for _, n := range field.Names {
				if n.IsExported() {
					check(ty.Name+"."+n.Name, field.Doc.Text()+field.Comment.Text())
				}
			}
		}
	}
}
