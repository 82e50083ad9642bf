// Package rife is the RIFE 4.25 frame interpolator (Practical-RIFE's IFNet_HDv3, version 4.25) as a
// GoMLX graph: Interpolate makes the frame at a fraction t between two frames, batched over pairs,
// on the device. The architecture follows the PyTorch 4.25 file as vs-rife carries it
// (vsrife/IFNet_HDv3_v4_25.py, vsrife/warplayer.py) and FastVideo's MLX port of the released
// weights (fastvideo/third_party/rife_mlx/model/IFNet_HDv3.py, RIFE_HDv3.py, config.py).
package rife

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"fastvideo/internal/safetensors"
	"fastvideo/internal/weights"
)

// Config is the width of each IFBlock. The head (3 -> 16 -> 16 -> 16 -> 4 channels), the 13-channel
// block output (flow 4, mask 1, features 8), the eight residual convolutions per block and the
// scale pyramid are fixed by the 4.25 architecture.
type Config struct {
	BlockChannels []int `json:"block_channels"`
}

// Release is RIFE 4.25's configuration (fastvideo/third_party/rife_mlx/config.py: channels
// [192,128,96,64,32]).
func Release() Config { return Config{BlockChannels: []int{192, 128, 96, 64, 32}} }

// Tiny is a small random-weight configuration for tests and the tiny models.
func Tiny() Config { return Config{BlockChannels: []int{16, 12, 8, 8, 8}} }

// Scales is the coarse-to-fine pyramid of the five blocks at upstream's default inference scale 1
// (IFNet.scale_list = [16/scale, ..., 1/scale]); PadTo is the multiple the frame is padded to
// (RIFE_HDv3.py's pad_to, vs-rife's modulo 64 for 4.25).
var Scales = [numBlocks]int{16, 8, 4, 2, 1}

const (
	numBlocks   = 5
	PadTo       = 64
	resConvs    = 8
	headHidden  = 16
	headOut     = 4
	blockOut    = 13 // flow 4 + mask 1 + features 8, after PixelShuffle(2) of 4*13 channels
	featChans   = blockOut - 5
	firstInput  = 3 + 3 + 2*headOut + 1          // img0, img1, f0, f1, timestep: 15
	laterInputs = firstInput + 1 + featChans + 4 // + mask, features, flow: 28
	slope       = 0.2                            // LeakyReLU
	maxChannels = 4096                           // a sanity bound on configs read from weights
)

// Validate checks the block widths.
func (c Config) Validate() error {
	if len(c.BlockChannels) != numBlocks {
		return fmt.Errorf("rife: %d block widths, RIFE 4.25 has %d", len(c.BlockChannels), numBlocks)
	}
	for i, ch := range c.BlockChannels {
		if ch < 2 || ch%2 != 0 || ch > maxChannels {
			return fmt.Errorf("rife: block %d width %d: want an even number from 2 to %d", i, ch, maxChannels)
		}
	}
	return nil
}

// Layout is how a checkpoint names and lays out the IFNet's tensors.
type Layout int

const (
	// PyTorch is Practical-RIFE's flownet state dict (NCHW kernels [O,I,kh,kw], transposed
	// convolutions [I,O,kh,kw], "conv0.0.0", "lastconv.0"), with or without "module.".
	PyTorch Layout = iota
	// MLX is mlx-community/RIFE-4.25's model.safetensors (kernels [O,kh,kw,I], transposed ones
	// too; "conv0.0.conv", "lastconv").
	MLX
)

func (l Layout) String() string {
	if l == MLX {
		return "MLX (mlx-community/RIFE-4.25)"
	}
	return "PyTorch (Practical-RIFE flownet)"
}

// conv is one convolution of the graph: its weight and bias names in a checkpoint, its kernel shape
// as [out, in, k, k] (in PyTorch's Conv2d sense for ordinary ones, of the transposed convolution for
// transposed ones) and its role.
type conv struct {
	weight, bias string
	out, in, k   int
	transposed   bool
	beta         string // ResConv's per-channel scale, "" for other convolutions
}

// convs lists every convolution in graph order: the head, then per block conv0 (two), the residual
// convolutions and lastconv. The graph takes the weights in this order.
func convs(cfg Config, l Layout) []conv {
	out := []conv{
		plain(l, "encode.cnn0", headHidden, 3, 3), plain(l, "encode.cnn1", headHidden, headHidden, 3),
		plain(l, "encode.cnn2", headHidden, headHidden, 3),
		{weight: "encode.cnn3.weight", bias: "encode.cnn3.bias", out: headOut, in: headHidden, k: 4, transposed: true},
	}
	for b, c := range cfg.BlockChannels {
		in := firstInput
		if b > 0 {
			in = laterInputs
		}
		p := fmt.Sprintf("block%d.", b)
		seq := ".0"
		if l == MLX {
			seq = ".conv"
		}
		out = append(out, plain(l, p+"conv0.0"+seq, c/2, in, 3), plain(l, p+"conv0.1"+seq, c, c/2, 3))
		for j := range resConvs {
			r := plain(l, fmt.Sprintf("%sconvblock.%d.conv", p, j), c, c, 3)
			r.beta = fmt.Sprintf("%sconvblock.%d.beta", p, j)
			out = append(out, r)
		}
		last := p + "lastconv.0"
		if l == MLX {
			last = p + "lastconv"
		}
		out = append(out, conv{weight: last + ".weight", bias: last + ".bias", out: 4 * blockOut, in: c, k: 4, transposed: true})
	}
	return out
}

func plain(_ Layout, name string, out, in, k int) conv {
	return conv{weight: name + ".weight", bias: name + ".bias", out: out, in: in, k: k}
}

// weightShape is the checkpoint shape of c's kernel in layout l.
func (c conv) weightShape(l Layout) []int {
	switch {
	case l == MLX:
		return []int{c.out, c.k, c.k, c.in}
	case c.transposed:
		return []int{c.in, c.out, c.k, c.k}
	}
	return []int{c.out, c.in, c.k, c.k}
}

// declare builds the parameter table of cfg in layout l, in graph order (per convolution: weight,
// bias, then beta for residual ones).
func declare(cfg Config, l Layout) *weights.Set {
	set := weights.NewSet("")
	for _, c := range convs(cfg, l) {
		set.Add(c.weight, c.weightShape(l)...)
		set.Add(c.bias, c.out)
		if c.beta != "" {
			if l == MLX {
				set.Add(c.beta, 1, 1, 1, c.out)
			} else {
				set.Add(c.beta, 1, c.out, 1, 1)
			}
		}
	}
	return set
}

// Params is the checkpoint table (names and shapes) of cfg in layout l.
func Params(cfg Config, l Layout) (weights.Shapes, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return weights.ShapesOf(declare(cfg, l).Params()), nil
}

// ifnetSource is the IFNet's part of a checkpoint: "module." (DataParallel) stripped, and only the
// names under block0..4 and encode, so that upstream's training-only tensors (the teacher and
// timestep-calibration modules Practical-RIFE's flownet.pkl also holds) are not reported.
type ifnetSource struct {
	src   weights.Source
	names map[string]string // IFNet name -> source name
}

func newIFNetSource(src weights.Source) *ifnetSource {
	s := &ifnetSource{src: src, names: map[string]string{}}
	for _, n := range src.Names() {
		short := strings.TrimPrefix(n, "module.")
		if strings.HasPrefix(short, "encode.") || (strings.HasPrefix(short, "block") && len(short) > 6 && short[5] >= '0' && short[5] <= '9') {
			s.names[short] = n
		}
	}
	return s
}

func (s *ifnetSource) Names() []string { return slices.Sorted(maps.Keys(s.names)) }

func (s *ifnetSource) Tensor(name string) (safetensors.Info, bool) {
	full, ok := s.names[name]
	if !ok {
		return safetensors.Info{}, false
	}
	return s.src.Tensor(full)
}

// Check reads a checkpoint's layout (Detect) and checks, from the headers alone, that it holds every
// tensor of that layout's table at its shape and as floats: a file that would fail mid-load, after a
// generation's denoising, fails here instead.
func Check(src weights.Source) error {
	cfg, layout, err := Detect(src)
	if err != nil {
		return err
	}
	table, err := Params(cfg, layout)
	if err != nil {
		return err
	}
	s := newIFNetSource(src)
	var problems []string
	for _, p := range table {
		info, ok := s.Tensor(p.Name)
		switch {
		case !ok:
			problems = append(problems, p.Name+" missing")
		case !slices.Equal(info.Shape, p.Shape):
			problems = append(problems, fmt.Sprintf("%s is %v, want %v", p.Name, info.Shape, p.Shape))
		case !info.DType.IsFloat():
			problems = append(problems, fmt.Sprintf("%s is %s, want floats", p.Name, info.DType))
		}
	}
	if len(problems) == 0 {
		return nil
	}
	more := ""
	if len(problems) > 3 {
		more, problems = fmt.Sprintf(" (and %d more)", len(problems)-3), problems[:3]
	}
	return fmt.Errorf("rife: a RIFE 4.25 %s checkpoint of block widths %v, but %s%s", layout, cfg.BlockChannels, strings.Join(problems, "; "), more)
}

// Detect reads a checkpoint's layout and block widths from its tensor names and shapes.
func Detect(src weights.Source) (Config, Layout, error) {
	s := newIFNetSource(src)
	layout := PyTorch
	if _, ok := s.Tensor("block0.lastconv.weight"); ok {
		layout = MLX
	} else if _, ok := s.Tensor("block0.lastconv.0.weight"); !ok {
		return Config{}, 0, fmt.Errorf("rife: not a RIFE 4.25 checkpoint: neither block0.lastconv.0.weight (Practical-RIFE) nor block0.lastconv.weight (mlx-community/RIFE-4.25) is present (%d tensors)", len(src.Names()))
	}
	var cfg Config
	for b := range numBlocks {
		name := fmt.Sprintf("block%d.lastconv.0.weight", b)
		axis := 0 // PyTorch ConvTranspose2d [in, out, kh, kw]
		if layout == MLX {
			name, axis = fmt.Sprintf("block%d.lastconv.weight", b), 3 // [out, kh, kw, in]
		}
		info, ok := s.Tensor(name)
		if !ok || len(info.Shape) != 4 {
			return Config{}, 0, fmt.Errorf("rife: %s layout: %s missing or not 4-D", layout, name)
		}
		cfg.BlockChannels = append(cfg.BlockChannels, info.Shape[axis])
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, 0, err
	}
	return cfg, layout, nil
}
