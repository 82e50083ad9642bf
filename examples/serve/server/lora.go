package server

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"fastvideo/fastvideo"
)

// LoRA is an adapter named by its file name within the server's adapter folder (Config.LoRADir).
type LoRA struct {
	Name     string  `json:"name"`
	Strength float64 `json:"strength"`
}

// ResolveLoRA turns an adapter's file name into its path within dir. Only a plain file name listed in
// dir is accepted: no separator, no "..", no absolute or hidden name, a regular file (not a link, a
// folder or a device) ending in .safetensors; so no name a client sends reaches any other file.
func ResolveLoRA(dir, name string) (string, error) {
	if dir == "" {
		return "", fmt.Errorf("this server takes no LoRA adapters (it was started without -lora-dir)")
	}
	if name == "" || name != filepath.Base(name) || strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, ".") ||
		filepath.IsAbs(name) || !strings.HasSuffix(name, ".safetensors") {
		return "", fmt.Errorf("adapter %q is not a file name of the server's adapter folder: give a plain NAME.safetensors, no path", name)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("the adapter folder cannot be read")
	}
	for _, e := range entries {
		if e.Name() == name {
			if !e.Type().IsRegular() {
				return "", fmt.Errorf("adapter %q is not a regular file", name)
			}
			return filepath.Join(dir, name), nil
		}
	}
	return "", fmt.Errorf("no adapter %q in the server's adapter folder", name)
}

// parseLoRAs reads the "loras" field: a JSON array of {"name", "strength"} (strength 1 when absent), or
// a string holding one (a form field).
func parseLoRAs(raw json.RawMessage) ([]LoRA, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		raw = json.RawMessage(s)
	}
	var items []struct {
		Name     string   `json:"name"`
		Strength *float64 `json:"strength"`
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&items); err != nil {
		return nil, err
	}
	out := make([]LoRA, len(items))
	for i, it := range items {
		out[i] = LoRA{Name: it.Name, Strength: 1}
		if it.Strength != nil {
			out[i].Strength = *it.Strength
		}
	}
	return out, nil
}

// checkLoRAs admits a request's adapters: each a file of the adapter folder, and together the set the
// generator merged at start. Adapters are merged into the weights when the model loads, so a job cannot
// change them; a different set needs a server started with it (-lora). Not reloading keeps one model in
// memory and no job waiting on another's load.
func (s *Server) checkLoRAs(asked []LoRA) error {
	for _, l := range asked {
		if _, err := ResolveLoRA(s.cfg.LoRADir, l.Name); err != nil {
			return invalid("loras", "%v", err)
		}
		if math.IsNaN(l.Strength) || math.IsInf(l.Strength, 0) {
			return invalid("loras", "adapter %q: strength %v is not a finite number", l.Name, l.Strength)
		}
	}
	if !slices.Equal(asked, s.cfg.LoRA) {
		return invalid("loras", "this server merged the adapters %s into its model when it started; adapters are merged at load, "+
			"so a job cannot change them: omit loras, send exactly that list, or start a server with the adapters you need (-lora NAME[:STRENGTH])",
			describeLoRAs(s.cfg.LoRA))
	}
	return nil
}

func describeLoRAs(ls []LoRA) string {
	if len(ls) == 0 {
		return "[] (none)"
	}
	parts := make([]string, len(ls))
	for i, l := range ls {
		parts[i] = fmt.Sprintf("%s at %g", l.Name, l.Strength)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// LoRAOptions are the generator options of adapters named within dir (the server's -lora flags).
func LoRAOptions(dir string, ls []LoRA) ([]fastvideo.Option, error) {
	var opts []fastvideo.Option
	for _, l := range ls {
		path, err := ResolveLoRA(dir, l.Name)
		if err != nil {
			return nil, err
		}
		opts = append(opts, fastvideo.WithLoRA(path, l.Strength))
	}
	return opts, nil
}
