package backend

import (
	"fmt"
	"path/filepath"
	"strings"
)

const (
	// EnvBackend is GoMLX's own variable; an empty spec honours it.
	EnvBackend = "GOMLX_BACKEND"
	// EnvPlugin names a PJRT plugin file (or a folder holding one); it wins over every search.
	EnvPlugin = "FASTVIDEO_PJRT_PLUGIN"
	// EnvPluginPath is go-xla's plugin folder list (":" separated).
	EnvPluginPath = "PJRT_PLUGIN_LIBRARY_PATH"
	// EnvPreload forces ("1") or forbids ("0") preloading the NVIDIA libraries.
	EnvPreload = "FASTVIDEO_PJRT_PRELOAD"

	// DefaultSpec is used when neither the spec nor GOMLX_BACKEND says anything.
	DefaultSpec = "go:ops_sequential"
)

// Kind is the backend a plan creates: GoMLX's pure-Go backend or XLA
// through a PJRT plugin. Its values are GoMLX's registered backend names.
type Kind string

const (
	KindGo  Kind = "go"
	KindXLA Kind = "xla"
)

// commonSpecs leads every "unknown backend" error; allowedSpecs follows it
// with every form and option.
const commonSpecs = `use "go", "go:ops_sequential", "xla:cuda" or "xla:metal"`

// allowedSpecs is quoted by every "unknown backend" error.
const allowedSpecs = `allowed specs: "" (use $GOMLX_BACKEND, else go:ops_sequential), ` +
	`"go" (pure-Go CPU backend, run as go:ops_sequential), "go:<options>" (e.g. go:parallelism=-1), ` +
	`"xla:cuda[,options]" or "cuda" (NVIDIA GPU, linux), "xla:metal[,options]" or "metal" (Apple GPU, darwin), ` +
	`"xla:/abs/path/to/plugin.so[,options]"; xla options: tf32=false, preallocate=true, memory_fraction=0.75, ` +
	`allocator=bfc|cuda_async|platform|vmm, visible_devices=0;1, use_tfrt_gpu_client`

// request is a parsed spec.
type request struct {
	backend  Kind
	goConfig string // options for the go backend
	platform string // "cuda", "metal", or "" when plugin holds an explicit path
	plugin   string // explicit absolute plugin path
	options  string // xla options after the plugin name, without the leading comma
}

// origin names a spec as the user wrote it: `backend "bogus"` for an
// argument, `$GOMLX_BACKEND="bogus"` for the variable, `default backend
// "go:ops_sequential"` for the default.
func origin(spec, source string) string {
	switch {
	case strings.HasPrefix(source, "$"):
		return fmt.Sprintf("%s=%q", source, spec)
	case source == "default":
		return fmt.Sprintf("default backend %q", spec)
	}
	return fmt.Sprintf("backend %q", spec)
}

// parseSpec turns a spec into a request; goos decides what a bare "xla" means.
func parseSpec(spec, source, goos string) (request, error) {
	s := strings.TrimSpace(spec)
	name, rest, hasColon := strings.Cut(s, ":")
	// "cuda,tf32=false" has no colon: the options follow the name after a comma.
	if !hasColon {
		name, rest, _ = strings.Cut(s, ",")
		if rest != "" {
			rest = "," + rest
		}
	}
	name = strings.ToLower(strings.TrimSpace(name))
	switch name {
	case "go":
		cfg := strings.TrimSpace(strings.TrimPrefix(rest, ","))
		if cfg == "" {
			cfg = "ops_sequential"
		}
		return request{backend: KindGo, goConfig: cfg}, nil
	case "cuda", "metal":
		return request{backend: KindXLA, platform: name, options: strings.TrimPrefix(rest, ",")}, nil
	case "xla":
		target, opts, _ := strings.Cut(rest, ",")
		target = strings.TrimSpace(target)
		req := request{backend: KindXLA, options: opts}
		switch {
		case target == "":
			// A bare "xla" would make GoMLX search and download; it means this OS's GPU here.
			req.platform = "cuda"
			if goos == "darwin" {
				req.platform = "metal"
			}
		case filepath.IsAbs(target):
			req.plugin = filepath.Clean(target)
		case strings.EqualFold(target, "cuda"), strings.EqualFold(target, "metal"):
			req.platform = strings.ToLower(target)
		case strings.EqualFold(target, "help"):
			return request{}, fmt.Errorf("%s: %s; %s", origin(spec, source), commonSpecs, allowedSpecs)
		default:
			return request{}, fmt.Errorf("%s names no known PJRT plugin %q (no CPU/TPU plugin is shipped: "+
				"CPU work runs on the pure-Go backend, \"go\"): %s; %s",
				origin(spec, source), target, commonSpecs, allowedSpecs)
		}
		return req, nil
	}
	return request{}, fmt.Errorf("%s is not known: %s; %s", origin(spec, source), commonSpecs, allowedSpecs)
}
