// Package promptenhance expands a short prompt into the long, cinematic shot language the video
// models were trained on, deterministically and on the machine: the template backend of FastVideo's
// MLX runtime (fastvideo/mlx_runtime/prompt_enhance.py, enhance_prompt_template and
// load_or_enhance_prompt), with its content-addressed cache. Its mlx-lm backend (a local LLM) has no
// counterpart here.
package promptenhance

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"unicode"
	"unicode/utf8"

	"fastvideo/internal/safefile"
	"fastvideo/internal/safetensors"
)

// Backend is the one backend this package has.
const Backend = "template"

// Cue lists matched as lower-case substrings ("sunflower" has "sun", "panda" has "pan"), as upstream.
var (
	cameraCues = []string{"cinematic", "camera", "lens", "shot", "bokeh", "dolly", "tracking", "close-up", "wide shot", "handheld", "steadicam"}
	lightCues  = []string{"light", "lighting", "sun", "golden hour", "neon", "rim light", "softbox", "overcast", "moonlight", "volumetric"}
	motionCues = []string{"moving", "motion", "walk", "run", "flies", "flying", "drifts", "sails", "flows", "pan", "tilt", "zoom"}
)

// The clauses appended for each missing category, then always the quality clause (upstream's literals).
const (
	cameraClause  = "shot on a 35mm anamorphic lens, gentle handheld micro-movement, shallow depth of field"
	lightClause   = "natural cinematic lighting with soft volumetric haze and subtle rim light separating subject from background"
	motionClause  = "smooth continuous motion with grounded physics"
	qualityClause = "highly detailed, coherent temporal continuity, film grain, color graded like a contemporary drama"
)

// richLength is the length (in characters) from which a prompt with camera and light cues is kept as it is.
const richLength = 160

// ErrEmpty is the error of a prompt that is empty once its white space is collapsed.
var ErrEmpty = errors.New("the prompt is empty")

// isSpace is Python's str.isspace, which upstream's split() and \s use: Unicode white space plus
// the ASCII information separators U+001C..U+001F, which Go's unicode.IsSpace leaves out.
func isSpace(r rune) bool { return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f) }

// Normalize trims the prompt and collapses every run of white space into one space.
func Normalize(prompt string) (string, error) {
	text := strings.Join(strings.FieldsFunc(prompt, isSpace), " ")
	if text == "" {
		return "", ErrEmpty
	}
	return text, nil
}

func hasCue(lower string, cues []string) bool {
	for _, c := range cues {
		if strings.Contains(lower, c) {
			return true
		}
	}
	return false
}

// Template is upstream's enhance_prompt_template: a prompt of 160 characters or more that already has
// camera and light cues comes back normalized; otherwise a clause is appended for each missing cue
// category (camera, light, motion) and then the quality clause, joined with ", ", ending in one period.
func Template(prompt string) (string, error) {
	text, err := Normalize(prompt)
	if err != nil {
		return "", err
	}
	lower := strings.ToLower(text)
	camera, light := hasCue(lower, cameraCues), hasCue(lower, lightCues)
	if utf8.RuneCountInString(text) >= richLength && camera && light {
		return text, nil
	}
	parts := []string{strings.TrimRight(text, ".")}
	if !camera {
		parts = append(parts, cameraClause)
	}
	if !light {
		parts = append(parts, lightClause)
	}
	if !hasCue(lower, motionCues) {
		parts = append(parts, motionClause)
	}
	parts = append(parts, qualityClause)
	out := strings.Join(strings.FieldsFunc(strings.Join(parts, ", "), isSpace), " ")
	if !strings.HasSuffix(out, ".") {
		out += "."
	}
	return out, nil
}

// Result is an enhancement: the normalized original, the prompt to generate from, and where it came
// from ("template", or "cache" for a cache hit).
type Result struct {
	Original string `json:"original"`
	Enhanced string `json:"enhanced"`
	Backend  string `json:"backend"`
}

// cached is a cache file's content, upstream's {original, enhanced, backend, model}.
type cached struct {
	Original string  `json:"original"`
	Enhanced string  `json:"enhanced"`
	Backend  string  `json:"backend"`
	Model    *string `json:"model"`
}

// maxCacheFile bounds what a cache read takes: an entry holds two prompts.
const maxCacheFile = 1 << 20

// CachePath is upstream's content address of an enhanced prompt: dir/<sha256(prompt NUL backend NUL
// model)[:24]>.json, with the requested backend and no model (the template has none).
func CachePath(dir, normalized, backend string) string {
	sum := sha256.Sum256([]byte(normalized + "\x00" + backend + "\x00"))
	return filepath.Join(dir, hex.EncodeToString(sum[:])[:24]+".json")
}

// Enhance enhances prompt with the template, through the cache in dir ("" for none): a hit is reported
// as backend "cache"; a miss is written for next time (atomically). Cache I/O errors only cost the
// cache, as upstream's.
func Enhance(prompt, dir string) (Result, error) {
	text, err := Normalize(prompt)
	if err != nil {
		return Result{}, err
	}
	path := ""
	if dir != "" {
		path = CachePath(dir, text, Backend)
		if r, ok := readCache(path, text); ok {
			return r, nil
		}
	}
	enhanced, err := Template(text)
	if err != nil {
		return Result{}, err
	}
	r := Result{Original: text, Enhanced: enhanced, Backend: Backend}
	if path != "" {
		_ = writeCache(path, cached{Original: r.Original, Enhanced: r.Enhanced, Backend: r.Backend})
	}
	return r, nil
}

// readCache reads a cache entry; a missing, unreadable, oversized or malformed one is a miss, and so is
// one written for another prompt (a hash collision or a tampered file).
func readCache(path, original string) (Result, bool) {
	data, err := safefile.ReadFile(path, maxCacheFile)
	if err != nil {
		return Result{}, false
	}
	var c cached
	if json.Unmarshal(data, &c) != nil || c.Enhanced == "" || c.Original != original {
		return Result{}, false
	}
	return Result{Original: c.Original, Enhanced: c.Enhanced, Backend: "cache"}, true
}

// writeCache writes c atomically (safetensors.WriteAtomic: a temporary file renamed into place).
func writeCache(path string, c cached) error {
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return safetensors.WriteAtomic(path, data)
}
