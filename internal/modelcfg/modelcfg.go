// Package modelcfg reads the config.json of a model component folder (transformer/, vae/,
// text_encoder/, …) the one way every model package does: the file, parsed by the package's own
// ParseConfig, with errors that name the file and say what folder was expected.
package modelcfg

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"fastvideo/internal/safefile"
	"fastvideo/internal/strictjson"
)

// MaxJSONBytes bounds a model folder's JSON file (a config, a manifest, a contract): far above
// any real one, small enough that a hostile file costs nothing.
const MaxJSONBytes = 16 << 20

// ReadJSON reads a model folder's JSON file the untrusting way: a regular file only (a FIFO is
// refused without blocking), at most MaxJSONBytes, and no key repeated in any object (which one
// would win is a parser's accident). A missing file wraps os.ErrNotExist.
func ReadJSON(path string) ([]byte, error) {
	data, err := safefile.ReadFile(path, MaxJSONBytes)
	if err != nil {
		return nil, err
	}
	if err := strictjson.CheckUniqueKeys(data); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return data, nil
}

// Read parses path/config.json (or path itself when it is a file or names a .json file) with parse. A read failure is
// reported as "<context>: <error> (<hint>)" (without the parenthesis when hint is empty), a parse
// failure as "<parse error> (in <file>)".
func Read[C any](path string, parse func([]byte) (C, error), context, hint string) (C, error) {
	if st, err := os.Stat(path); (err == nil && st.IsDir()) || (err != nil && filepath.Ext(path) != ".json") {
		path = filepath.Join(path, "config.json") // a missing folder is reported by its config.json
	}
	data, err := ReadJSON(path)
	if err != nil {
		var zero C
		if hint != "" {
			return zero, fmt.Errorf("%s: %w (%s)", context, err, hint)
		}
		return zero, fmt.Errorf("%s: %w", context, err)
	}
	c, err := parse(data)
	if err != nil {
		var zero C
		return zero, fmt.Errorf("%w (in %s)", err, path)
	}
	return c, nil
}

// Problems collects what is wrong with a config, so that Validate names every bad field at once
// instead of one per run.
type Problems []string

// Add records one problem.
func (p *Problems) Add(format string, args ...any) { *p = append(*p, fmt.Sprintf(format, args...)) }

// Bounds a config from the internet may claim: a width or count above MaxSize, or a stack deeper
// than MaxLayers, is no real model and would only exhaust memory once loading starts.
const (
	MaxSize   = 1 << 20
	MaxLayers = 1024
)

// Positive records field name unless 0 < v <= MaxSize.
func (p *Problems) Positive(name string, v int) {
	if v <= 0 || v > MaxSize {
		p.Add("%s = %d must be in 1..%d", name, v, MaxSize)
	}
}

// Layers records field name unless 0 < v <= MaxLayers.
func (p *Problems) Layers(name string, v int) {
	if v <= 0 || v > MaxLayers {
		p.Add("%s = %d must be in 1..%d", name, v, MaxLayers)
	}
}

// CheckSize is Positive for validators that stop at the first problem: nil when 0 < v <= max.
func CheckSize(context, name string, v, max int) error {
	if v <= 0 || v > max {
		return fmt.Errorf("%s: config %s = %d, must be in 1..%d", context, name, v, max)
	}
	return nil
}

// PositiveFloat records field name unless v is a finite number > 0.
func (p *Problems) PositiveFloat(name string, v float64) {
	if !(v > 0) || math.IsInf(v, 0) {
		p.Add("%s = %g must be a positive number", name, v)
	}
}

// Err is nil without problems, else "<context>: invalid config: <problem>; <problem>…".
func (p Problems) Err(context string) error {
	if len(p) == 0 {
		return nil
	}
	return fmt.Errorf("%s: invalid config: %s", context, strings.Join(p, "; "))
}

// Validator is a parsed config.
type Validator interface{ Validate() error }

// Valid returns c when its Validate accepts it, else the zero config and Validate's error: the last
// step of every ParseConfig.
func Valid[C Validator](c C) (C, error) {
	if err := c.Validate(); err != nil {
		var zero C
		return zero, err
	}
	return c, nil
}
