// Package archtest checks module-wide rules of docs/architecture.md on the
// whole module (one-way imports, short functions, no environment reads below
// fastvideo/, a doc comment and an index line for every package), so that a
// stray import, a creeping function or a package the map does not show fails
// CI instead of eroding the design.
package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const module = "fastvideo"

// contract is the package every model family implements and the root
// package drives; it sits below the families.
const contract = module + "/fastvideo/family"

// beside are the packages at the contract's rank that are not the contract: what the families and the
// root package share besides it: the data a caller exchanges with the SDK (requests, results, plans,
// events), the frame filters run after decode, which families configure, and the helpers the
// families have in common.
var beside = map[string]bool{
	module + "/fastvideo/api": true, module + "/fastvideo/framefilter": true, module + "/fastvideo/familykit": true,
}

// testHelpers is the helper package of the tests that drive the SDK through its public API; only
// test files may import it.
const testHelpers = module + "/fastvideo/fvtest"

// Ranks of the layers: a package may import only lower ranks, or its own
// rank except across families.
const (
	rankInternal  = 0
	rankAttention = 1
	rankModels    = 2 // dit, vae, schedule, quant
	rankContract  = 3 // fastvideo/family
	rankFamily    = 4 // fastvideo/<family>, e.g. fastvideo/h3, fastvideo/wan
	rankRoot      = 5 // fastvideo
	rankExamples  = 6
)

// layer ranks a package: examples -> fastvideo (the root package) ->
// fastvideo/<family> -> fastvideo/family (the shared contract) -> dit, vae,
// schedule, quant -> attention -> internal. -1 is outside the layout.
func layer(pkg string) int {
	rel := strings.TrimPrefix(pkg, module+"/")
	top := strings.SplitN(rel, "/", 2)[0]
	switch top {
	case "internal":
		return rankInternal
	case "attention":
		return rankAttention
	case "dit", "vae", "schedule", "quant":
		return rankModels
	case "examples":
		return rankExamples
	case "fastvideo":
		switch {
		case pkg == module+"/fastvideo", pkg == testHelpers:
			return rankRoot
		case pkg == contract || strings.HasPrefix(pkg, contract+"/") || beside[pkg]:
			return rankContract
		}
		return rankFamily
	}
	return -1
}

// family is the fastvideo/<x> family a package belongs to, "" for any other.
func family(pkg string) string {
	if layer(pkg) != rankFamily {
		return ""
	}
	return strings.SplitN(strings.TrimPrefix(pkg, module+"/fastvideo/"), "/", 2)[0]
}

// importViolation says why package from must not import package to ("" if
// it may).
func importViolation(from, to string) string {
	f, t := layer(from), layer(to)
	switch {
	case t > f:
		return "imports must flow examples -> fastvideo -> fastvideo/<family> -> fastvideo/family -> dit/vae/schedule/quant -> attention -> internal"
	case f == rankFamily && t == rankFamily && family(from) != family(to):
		return "families must not import each other: share code through fastvideo/family or a lower layer"
	}
	return ""
}

// goFile is one Go file of the module.
type goFile struct {
	path string // as opened
	rel  string // slash path from the module root
	pkg  string // import path of its folder
	test bool
}

// moduleFiles lists every Go file of the module, testdata and hidden folders
// aside.
func moduleFiles(t *testing.T) (root string, files []goFile) {
	t.Helper()
	root = filepath.Join("..", "..")
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found: %v", err)
	}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		pkg := module
		if dir := filepath.ToSlash(filepath.Dir(rel)); dir != "." {
			pkg += "/" + dir
		}
		files = append(files, goFile{path: path, rel: rel, pkg: pkg, test: strings.HasSuffix(path, "_test.go")})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 50 {
		t.Fatalf("found only %d Go files: is the module root right?", len(files))
	}
	return root, files
}

// importer is the package whose imports a file of folder pkg declares: the folder's package, or
// for a family's external tests (package <name>_test) a package at the root's rank, since they
// run the family through the public API (fastvideo.New) and nothing imports them.
func importer(pkg, packageName string) string {
	if strings.HasSuffix(packageName, "_test") && layer(pkg) == rankFamily {
		return module + "/fastvideo"
	}
	return pkg
}

func TestImportsFlowOneWay(t *testing.T) {
	_, files := moduleFiles(t)
	fset := token.NewFileSet()
	for _, gf := range files {
		if layer(gf.pkg) < 0 {
			t.Errorf("%s: package %s is outside the layout of docs/architecture.md", gf.rel, gf.pkg)
			continue
		}
		f, err := parser.ParseFile(fset, gf.path, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		from := importer(gf.pkg, f.Name.Name)
		for _, imp := range f.Imports {
			target := strings.Trim(imp.Path.Value, `"`)
			if strings.HasPrefix(gf.pkg, module+"/schedule") && !gf.test && strings.Contains(target, "gomlx") {
				t.Errorf("%s imports %s: schedule/ is plain Go math", gf.rel, target)
			}
			if !strings.HasPrefix(target, module+"/") {
				continue
			}
			if target == testHelpers && !gf.test {
				t.Errorf("%s imports %s: only tests import the test helpers", gf.rel, target)
			}
			if why := importViolation(from, target); why != "" {
				t.Errorf("%s (%s) imports %s: %s", gf.rel, gf.pkg, target, why)
			}
		}
	}
}

// TestLayerRules pins the rule on packages that may not exist yet.
func TestLayerRules(t *testing.T) {
	const m = module + "/"
	for _, c := range []struct {
		from, to string
		ok       bool
	}{
		{m + "examples/t2va", m + "fastvideo", true},
		{m + "fastvideo", m + "fastvideo/h3", true},
		{m + "fastvideo", m + "fastvideo/family", true},
		{m + "fastvideo/h3", m + "fastvideo/family", true},
		{m + "fastvideo/h3", m + "fastvideo/h3/plan", true},
		{m + "fastvideo/h3", m + "dit/h3", true},
		{m + "fastvideo/family", m + "schedule", true},
		{m + "dit/h3", m + "attention", true},
		{m + "attention", m + "internal/gx", true},
		{m + "fastvideo/h3", m + "fastvideo", false},
		{m + "fastvideo/h3", m + "fastvideo/wan", false},
		{m + "fastvideo/family", m + "fastvideo/h3", false},
		{m + "fastvideo/family", m + "fastvideo", false},
		{m + "dit/h3", m + "fastvideo/family", false},
		{m + "internal/media", m + "fastvideo", false},
		{m + "attention", m + "dit/h3", false},
		{m + "fastvideo", m + "examples/internal/cli", false},
	} {
		if why := importViolation(c.from, c.to); (why == "") != c.ok {
			t.Errorf("%s imports %s: allowed=%v, want %v (%s)", c.from, c.to, why == "", c.ok, why)
		}
	}
	// A family's external tests may drive the root package; a family itself, or another layer's
	// external tests, may not.
	for _, c := range []struct{ pkg, name, want string }{
		{m + "fastvideo/h3", "h3_test", m + "fastvideo"},
		{m + "fastvideo/h3", "h3", m + "fastvideo/h3"},
		{m + "dit/h3", "h3_test", m + "dit/h3"},
	} {
		if got := importer(c.pkg, c.name); got != c.want {
			t.Errorf("package %s in %s imports as %s, want %s", c.name, c.pkg, got, c.want)
		}
	}
}

// maxFuncLines bounds a non-test function, counted from its func line to its
// closing brace.
const maxFuncLines = 80

// longFuncAllowed lists the pure data tables allowed past maxFuncLines, as
// "path/from/root.go:Func" (methods "Type.Method") with the reason. Keep it short.
var longFuncAllowed = map[string]string{}

func TestFunctionsAreShort(t *testing.T) {
	_, files := moduleFiles(t)
	fset := token.NewFileSet()
	seen := map[string]bool{}
	var long []string
	for _, gf := range files {
		if gf.test {
			continue
		}
		f, err := parser.ParseFile(fset, gf.path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			lines := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
			key := gf.rel + ":" + funcName(fn)
			if lines <= maxFuncLines {
				continue
			}
			if _, ok := longFuncAllowed[key]; ok {
				seen[key] = true
				continue
			}
			long = append(long, key+" has "+strconv.Itoa(lines)+" lines")
		}
	}
	sort.Strings(long)
	for _, l := range long {
		t.Errorf("%s, over %d: split it into named steps", l, maxFuncLines)
	}
	for key := range longFuncAllowed {
		if !seen[key] {
			t.Errorf("longFuncAllowed lists %s, which is gone or no longer over %d lines: remove the entry", key, maxFuncLines)
		}
	}
}

// funcName is Func, or Type.Method for a method.
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	typ := fn.Recv.List[0].Type
	for {
		switch x := typ.(type) {
		case *ast.StarExpr:
			typ = x.X
			continue
		case *ast.IndexExpr:
			typ = x.X
			continue
		case *ast.IndexListExpr:
			typ = x.X
			continue
		case *ast.Ident:
			return x.Name + "." + fn.Name.Name
		}
		return fn.Name.Name
	}
}

// envReaders are the os functions that read the process environment.
var envReaders = map[string]bool{"Getenv": true, "LookupEnv": true, "Environ": true}

// mayReadEnv: configuration is read at the top (examples/, fastvideo's
// options files), by the tests' helpers (internal/testutil) and in internal/backend (GOMLX_BACKEND and the PJRT
// variables decide how the process loads XLA); everything else receives it
// as typed options.
func mayReadEnv(gf goFile) bool {
	dir, name := filepath.ToSlash(filepath.Dir(gf.rel)), filepath.Base(gf.rel)
	switch {
	case gf.test:
		return true
	case dir == "examples" || strings.HasPrefix(dir, "examples/"):
		return true
	case dir == "internal/backend":
		return true
	case dir == "internal/testutil": // the tests' own switches (fixtures, backend, GPU), read by tests only
		return true
	case dir == "fastvideo" && strings.HasPrefix(name, "options") && strings.HasSuffix(name, ".go"):
		return true
	}
	return false
}

func TestEnvironmentIsReadAtTheTop(t *testing.T) {

	_, files := moduleFiles(t)
	fset := token.NewFileSet()
	for _, gf := range files {
		if mayReadEnv(gf) {
			continue
		}
		f, err := parser.ParseFile(fset, gf.path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		osName := importName(f, "os")
		if osName == "" {
			continue
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok || !envReaders[sel.Sel.Name] {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == osName {
				t.Errorf("%s:%d reads the environment (os.%s): only examples/, fastvideo/options*.go and internal/backend may; pass the value down as an option",
					gf.rel, fset.Position(sel.Pos()).Line, sel.Sel.Name)
			}
			return true
		})
	}
}

// importName is the name a file uses for an imported package ("" if not
// imported).
func importName(f *ast.File, path string) string {
	for _, imp := range f.Imports {
		if strings.Trim(imp.Path.Value, `"`) != path {
			continue
		}
		if imp.Name != nil {
			return imp.Name.Name
		}
		return filepath.Base(path)
	}
	return ""
}
