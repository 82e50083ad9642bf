package archtest

import (
	"go/parser"
	"go/token"
	"os"
	"path"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// indexEntry is a line of docs/architecture.md's package index: "- `dir`: what it is".
var indexEntry = regexp.MustCompile("(?m)^- `([a-z0-9_/]+)`: ")

// packageIndex returns the folders the package index of docs/architecture.md names, with the line
// of each.
func packageIndex(t *testing.T, root string) map[string]int {
	t.Helper()
	doc, err := os.ReadFile(path.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	const heading = "\n## Every package, one line each\n"
	start := strings.Index(text, heading)
	if start < 0 {
		t.Fatalf("docs/architecture.md has no section %q", strings.TrimSpace(heading))
	}
	section := text[start+len(heading):]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	firstLine := strings.Count(text[:start+len(heading)], "\n") + 1
	entries := map[string]int{}
	for _, m := range indexEntry.FindAllStringSubmatchIndex(section, -1) {
		dir := section[m[2]:m[3]]
		line := firstLine + strings.Count(section[:m[0]], "\n")
		if prev, dup := entries[dir]; dup {
			t.Errorf("docs/architecture.md:%d names `%s` again (first at line %d)", line, dir, prev)
		}
		entries[dir] = line
	}
	return entries
}

// TestArchitectureNamesEveryPackage keeps docs/architecture.md's package index true: every folder
// holding Go code has its line, every line names such a folder, and every package says what it is
// in a doc comment ("// Package x ..." or "// Command x ...") that `go doc` shows.
func TestArchitectureNamesEveryPackage(t *testing.T) {
	root, files := moduleFiles(t)
	index := packageIndex(t, root)
	fset := token.NewFileSet()
	type pkgDoc struct{ code, doc, testDoc bool }
	pkgs := map[string]*pkgDoc{}
	for _, gf := range files {
		dir := path.Dir(gf.rel)
		if dir == "." {
			continue // the module root holds no package
		}
		p := pkgs[dir]
		if p == nil {
			p = &pkgDoc{}
			pkgs[dir] = p
		}
		f, err := parser.ParseFile(fset, gf.path, nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		hasDoc := f.Doc != nil && strings.TrimSpace(f.Doc.Text()) != ""
		if gf.test {
			p.testDoc = p.testDoc || hasDoc
			continue
		}
		p.code = true
		p.doc = p.doc || hasDoc
	}
	dirs := make([]string, 0, len(pkgs))
	for dir := range pkgs {
		dirs = append(dirs, dir)
	}
	sort.Strings(dirs)
	for _, dir := range dirs {
		p := pkgs[dir]
		if _, ok := index[dir]; !ok {
			t.Errorf("docs/architecture.md's package index has no line for `%s`: add \"- `%s`: <what it is>\" to the section \"Every package, one line each\"", dir, dir)
		}
		switch {
		case p.code && !p.doc:
			t.Errorf("package %s has no doc comment on a non-test file: add a doc.go with \"// Package <name> ...\" (go doc shows only those)", dir)
		case !p.code && !p.testDoc:
			t.Errorf("test-only package %s has no doc comment: start one of its files with \"// Package <name> ...\"", dir)
		}
	}
	for dir, line := range index {
		if pkgs[dir] == nil {
			t.Errorf("docs/architecture.md:%d names `%s`, which holds no Go package: remove the line or fix the path", line, dir)
		}
	}
}
