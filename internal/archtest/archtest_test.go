// Package archtest checks the one-way import rule of DEVELOPERS.md on the whole
// module, so that a stray import fails CI instead of eroding the layering.
package archtest

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const module = "fastvideo"

// layer ranks the top-level folders; a package may import only its own layer
// or lower ones: examples -> fastvideo -> dit, vae, schedule, quant -> attention -> internal.
func layer(pkg string) int {
	top := strings.SplitN(strings.TrimPrefix(pkg, module+"/"), "/", 2)[0]
	switch top {
	case "internal":
		return 0
	case "attention":
		return 1
	case "dit", "vae", "schedule", "quant":
		return 2
	case "fastvideo":
		return 3
	case "examples":
		return 4
	}
	return -1
}

func TestImportsFlowOneWay(t *testing.T) {
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bench") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		pkg := module + "/" + filepath.ToSlash(rel)
		from := layer(pkg)
		if from < 0 {
			t.Errorf("%s: package %s is outside the layout of DEVELOPERS.md", path, pkg)
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		checked++
		isTest := strings.HasSuffix(path, "_test.go")
		for _, imp := range f.Imports {
			target := strings.Trim(imp.Path.Value, `"`)
			if strings.HasPrefix(pkg, module+"/schedule") && !isTest && strings.Contains(target, "gomlx") {
				t.Errorf("%s imports %s: schedule/ is plain Go math", path, target)
			}
			if !strings.HasPrefix(target, module+"/") {
				continue
			}
			to := layer(target)
			if to > from {
				t.Errorf("%s (%s) imports %s: imports must flow examples -> fastvideo -> dit/vae/schedule/quant -> attention -> internal", path, pkg, target)
			}
			if strings.HasPrefix(target, module+"/fastvideo") && !strings.HasPrefix(pkg, module+"/examples") && !strings.HasPrefix(pkg, module+"/fastvideo") {
				t.Errorf("%s imports %s: only examples/ imports fastvideo/", path, target)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("checked only %d files: is the module root right?", checked)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found: %v", err)
	}
}
