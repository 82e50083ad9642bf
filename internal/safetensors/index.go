package safetensors

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"fastvideo/internal/safefile"
	"fastvideo/internal/strictjson"
)

// Checkpoint is a set of safetensors files read as one namespace: a sharded
// checkpoint (`*.safetensors.index.json`) or a folder of plain files.
type Checkpoint struct {
	Dir      string
	Metadata map[string]string
	files    []*File
	owner    map[string]*File
}

// OpenCheckpoint opens path, which may be a .safetensors file, an index JSON, or a
// folder holding either. In a folder an index wins; without one every
// .safetensors file is opened and the names must not collide.
func OpenCheckpoint(path string) (*Checkpoint, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	if !st.IsDir() {
		if strings.HasSuffix(path, ".index.json") {
			return openIndex(path)
		}
		return openFiles(filepath.Dir(path), []string{path})
	}
	indexes, _ := filepath.Glob(filepath.Join(path, "*.safetensors.index.json"))
	if len(indexes) > 1 {
		return nil, fmt.Errorf("safetensors: %s holds %d index files (%s): keep one", path, len(indexes), strings.Join(indexes, ", "))
	}
	if len(indexes) == 1 {
		return openIndex(indexes[0])
	}
	files, _ := filepath.Glob(filepath.Join(path, "*.safetensors"))
	if len(files) == 0 {
		return nil, fmt.Errorf("safetensors: no *.safetensors or *.safetensors.index.json in %s", path)
	}
	sort.Strings(files)
	return openFiles(path, files)
}

// maxIndexBytes bounds a shard index: one line per tensor name, a few MB for the largest
// released checkpoints.
const maxIndexBytes = 64 << 20

type indexFile struct {
	Metadata  map[string]any    `json:"metadata"`
	WeightMap map[string]string `json:"weight_map"`
}

func openIndex(indexPath string) (*Checkpoint, error) {
	raw, err := safefile.ReadFile(indexPath, maxIndexBytes)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	var idx indexFile
	if err := strictjson.CheckUniqueKeys(raw); err != nil {
		return nil, fmt.Errorf("safetensors: index %s: %v", indexPath, err)
	}
	if err := json.Unmarshal(raw, &idx); err != nil {
		return nil, fmt.Errorf("safetensors: index %s is not valid JSON: %v", indexPath, err)
	}
	if len(idx.WeightMap) == 0 {
		return nil, fmt.Errorf("safetensors: index %s has an empty weight_map", indexPath)
	}
	dir := filepath.Dir(indexPath)
	shardSet := map[string]bool{}
	for _, shard := range idx.WeightMap {
		if filepath.IsAbs(shard) || strings.Contains(shard, "..") {
			return nil, fmt.Errorf("safetensors: index %s names shard %q outside its folder", indexPath, shard)
		}
		shardSet[shard] = true
	}
	var shards []string
	for s := range shardSet {
		shards = append(shards, filepath.Join(dir, s))
	}
	sort.Strings(shards)
	ck, err := openFiles(dir, shards)
	if err != nil {
		return nil, err
	}
	var problems []string
	for name, shard := range idx.WeightMap {
		f := ck.owner[name]
		if f == nil {
			problems = append(problems, fmt.Sprintf("%q listed in %s is missing from the shards", name, shard))
		} else if filepath.Base(f.Path) != filepath.Base(shard) {
			problems = append(problems, fmt.Sprintf("%q listed in %s is stored in %s", name, shard, filepath.Base(f.Path)))
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		ck.Close()
		return nil, fmt.Errorf("safetensors: index %s disagrees with its shards:\n  %s", indexPath, strings.Join(problems, "\n  "))
	}
	return ck, nil
}

func openFiles(dir string, paths []string) (*Checkpoint, error) {
	ck := &Checkpoint{Dir: dir, owner: map[string]*File{}, Metadata: map[string]string{}}
	for _, p := range paths {
		f, err := Open(p)
		if err != nil {
			ck.Close()
			return nil, err
		}
		ck.files = append(ck.files, f)
		for k, v := range f.Metadata {
			ck.Metadata[k] = v
		}
		for _, n := range f.names {
			if prev := ck.owner[n]; prev != nil {
				ck.Close()
				return nil, fmt.Errorf("safetensors: tensor %q is in both %s and %s", n, prev.Path, f.Path)
			}
			ck.owner[n] = f
		}
	}
	return ck, nil
}

// Names lists every tensor, sorted.
func (c *Checkpoint) Names() []string {
	return slices.Sorted(maps.Keys(c.owner))
}

// Tensor finds a tensor in whichever shard holds it.
func (c *Checkpoint) Tensor(name string) (Info, bool) {
	f := c.owner[name]
	if f == nil {
		return Info{}, false
	}
	return f.Tensor(name)
}

// Files are the opened shards.
func (c *Checkpoint) Files() []*File { return c.files }

// Close unmaps every shard.
func (c *Checkpoint) Close() error {
	var errs []error
	for _, f := range c.files {
		errs = append(errs, f.Close())
	}
	c.files, c.owner = nil, map[string]*File{}
	return errors.Join(errs...)
}
