package h3

import (
	"fmt"
	"math"
	"sort"

	"fastvideo/internal/graphexec"

	"github.com/gomlx/gomlx/core/tensors"
)

// AdaLNTimestepTolerance is how far a step's timestep may be from a cached one and still use its tables.
const AdaLNTimestepTolerance = 1e-6

// AdaLNCache holds, for a sorted set of timesteps, every block's modulation table [n·3, 6, D] and the
// norm_out table [n, 2, D], on the device. Close frees them.
type AdaLNCache struct {
	// Timesteps are the cached timesteps, sorted ascending.
	Timesteps []float32
	tables    []*tensors.Tensor
	normOut   *tensors.Tensor
}

// Close frees the device tables.
func (c *AdaLNCache) Close() {
	if c == nil {
		return
	}
	graphexec.Finalize(c.tables...)
	graphexec.Finalize(c.normOut)
	c.tables, c.normOut = nil, nil
}

// positions maps each of a step's timesteps to its row in the cache.
func (c *AdaLNCache) positions(ts []float32) ([]int, error) {
	if c.normOut == nil {
		return nil, fmt.Errorf("h3: the AdaLN cache was closed")
	}
	pos := make([]int, len(ts))
	for i, t := range ts {
		j := nearest(c.Timesteps, t)
		if j < 0 || math.Abs(float64(c.Timesteps[j])-float64(t)) > AdaLNTimestepTolerance {
			return nil, fmt.Errorf("h3: timestep %.9g is not in the AdaLN cache %v; prepare the cache for this run's ladder",
				t, c.Timesteps)
		}
		pos[i] = j
	}
	return pos, nil
}

// nearest returns the index of the value of sorted closest to t (-1 if sorted is empty).
func nearest(sorted []float32, t float32) int {
	if len(sorted) == 0 {
		return -1
	}
	i := sort.Search(len(sorted), func(i int) bool { return sorted[i] >= t })
	switch {
	case i == len(sorted):
		return i - 1
	case i == 0:
		return 0
	case float64(sorted[i])-float64(t) < float64(t)-float64(sorted[i-1]):
		return i
	default:
		return i - 1
	}
}

// CacheTimesteps is the key set of an AdaLN cache for the given ladders: the sorted unique union of all
// timesteps plus 1.0 (the clean-condition time of FL2VA/Ref2VA rows), as the MLX converter builds it.
func CacheTimesteps(ladders ...[]float32) []float32 {
	set := map[float32]bool{1: true}
	for _, l := range ladders {
		for _, t := range l {
			set[t] = true
		}
	}
	out := make([]float32, 0, len(set))
	for t := range set {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// AdaLNManifest describes the AdaLN cache a converted checkpoint carries (the "adaln_cache" entry of
// its manifest, written by scripts/checkpoint_conversion/convert_minimax_h3_mlx.py).
type AdaLNManifest struct {
	// Timesteps are the cached keys, sorted ascending (float32).
	Timesteps []float32 `json:"timesteps"`
	// NumBlocks must equal the config's num_layers; TablesPerBlock is 6.
	NumBlocks      int `json:"num_blocks"`
	TablesPerBlock int `json:"tables_per_block"`
	// Steps is the number of forwards of the ladder the cache was exported for (0 when unknown).
	Steps int `json:"steps,omitempty"`
}

func (a *AdaLNManifest) validate(cfg Config) error {
	if len(a.Timesteps) == 0 {
		return fmt.Errorf("h3: AdaLN cache manifest lists no timesteps")
	}
	if !sort.SliceIsSorted(a.Timesteps, func(i, j int) bool { return a.Timesteps[i] < a.Timesteps[j] }) {
		return fmt.Errorf("h3: AdaLN cache manifest timesteps %v are not sorted ascending", a.Timesteps)
	}
	if a.NumBlocks != cfg.NumLayers {
		return fmt.Errorf("h3: AdaLN cache manifest num_blocks = %d, the config has num_layers = %d", a.NumBlocks, cfg.NumLayers)
	}
	if a.TablesPerBlock != 6 {
		return fmt.Errorf("h3: AdaLN cache manifest tables_per_block = %d, H3 has 6", a.TablesPerBlock)
	}
	return nil
}

// CheckAdaLNLadder verifies, before anything heavy is loaded, that a run of steps forwards whose
// timesteps are the given ladders (video, audio, ...) can be served by a checkpoint's AdaLN cache. A nil
// manifest (full checkpoint) accepts every ladder.
func CheckAdaLNLadder(manifest *AdaLNManifest, steps int, ladders ...[]float32) error {
	if manifest == nil {
		return nil
	}
	for _, l := range ladders {
		for _, t := range l {
			j := nearest(manifest.Timesteps, t)
			if j >= 0 && math.Abs(float64(manifest.Timesteps[j])-float64(t)) <= AdaLNTimestepTolerance {
				continue
			}
			if manifest.Steps > 0 {
				return fmt.Errorf("h3: checkpoint exported with a fixed %d-step AdaLN ladder (timesteps %v); "+
					"this run has %d steps and needs timestep %.9g: use steps=%d or re-export the checkpoint for this ladder",
					manifest.Steps, manifest.Timesteps, steps, t, manifest.Steps)
			}
			return fmt.Errorf("h3: checkpoint exported with a fixed AdaLN ladder (timesteps %v); this run has %d steps "+
				"and needs timestep %.9g: use the ladder it was exported for or re-export the checkpoint",
				manifest.Timesteps, steps, t)
		}
	}
	return nil
}
