package fastvideo

import (
	"fmt"
	"os"
	"strings"

	"fastvideo/fastvideo/family"
	"fastvideo/fastvideo/h3"
	"fastvideo/fastvideo/wan"
)

// families are the model families the SDK runs, in the order a model folder is offered to them.
// Adding a family is one package implementing family.Family and one line here.
var families = []family.Family{
	wan.Family{},
	h3.Family{},
}

// Models lists the built-in model names, family by family.
func Models() []string {
	var out []string
	for _, f := range families {
		out = append(out, f.Builtins()...)
	}
	return out
}

// LookupModel returns a built-in model ("fasth3", "h3", "tiny-h3", "tiny-wan", "wan2.1-t2v-1.3b",
// ...; Wan models also under their Hugging Face ids) or, for a directory, the model read from its
// configs (nothing heavy). WithFamily options add families (tests, third-party families).
func LookupModel(name string, opts ...Option) (family.Model, error) {
	o, err := applyOptions(opts)
	if err != nil {
		return nil, err
	}
	return lookup(name, o.families())
}

func lookup(name string, fams []family.Family) (family.Model, error) {
	for _, f := range fams {
		if m, ok := f.Lookup(name); ok {
			return m, nil
		}
	}
	if st, err := os.Stat(name); err == nil && st.IsDir() {
		return readFolder(name, fams)
	}
	var known, layouts []string
	for _, f := range fams {
		known = append(known, fmt.Sprintf("%s (%s)", strings.Join(f.Builtins(), ", "), f.Name()))
		layouts = append(layouts, f.FolderLayout())
	}
	return nil, &RequestError{Field: "model", Value: name, Allowed: fmt.Sprintf(
		"a built-in model: %s; or a model folder (%s)", strings.Join(known, "; "), strings.Join(layouts, "; "))}
}

// readFolder offers a folder to each family; a folder no family recognizes is invalid input that
// names what each family's snapshot holds.
func readFolder(dir string, fams []family.Family) (family.Model, error) {
	var layouts []string
	for _, f := range fams {
		ok, err := f.Detect(dir)
		if err != nil {
			return nil, err
		}
		if ok {
			return f.ReadFolder(dir)
		}
		layouts = append(layouts, f.FolderLayout())
	}
	return nil, &RequestError{Field: "model", Value: dir, Allowed: "a model folder: " + strings.Join(layouts, "; ")}
}
