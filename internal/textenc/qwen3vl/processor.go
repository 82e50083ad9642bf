package qwen3vl

import (
	"encoding/json"
	"fmt"
	"math"

	"fastvideo/internal/imageops"
	"fastvideo/internal/modelcfg"
)

// ProcessorConfig is the image half of the Qwen3-VL processor (processor/preprocessor_config.json,
// transformers' Qwen2VLImageProcessor keys): the resize bounds, the normalization and the patch
// geometry the vision tower expects.
type ProcessorConfig struct {
	PatchSize         int        `json:"patch_size"`
	TemporalPatchSize int        `json:"temporal_patch_size"`
	MergeSize         int        `json:"merge_size"`
	ImageMean         [3]float64 `json:"image_mean"`
	ImageStd          [3]float64 `json:"image_std"`
	RescaleFactor     float64    `json:"rescale_factor"`
	// MinPixels and MaxPixels bound the resized area (size.shortest_edge and size.longest_edge,
	// or the older min_pixels / max_pixels keys, which win as in transformers).
	MinPixels int `json:"-"`
	MaxPixels int `json:"-"`
}

// maxProcessorPixels bounds the area a processor config may claim: well above the released
// 16777216, far below what would overflow the resize arithmetic.
const maxProcessorPixels = 1 << 31

// ParseProcessorConfig reads preprocessor_config.json.
func ParseProcessorConfig(raw []byte) (ProcessorConfig, error) {
	var f struct {
		ProcessorConfig
		Size *struct {
			ShortestEdge int `json:"shortest_edge"`
			LongestEdge  int `json:"longest_edge"`
		} `json:"size"`
		MinPixels *int `json:"min_pixels"`
		MaxPixels *int `json:"max_pixels"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		return ProcessorConfig{}, fmt.Errorf("qwen3vl: processor config is not valid JSON: %v", err)
	}
	c := f.ProcessorConfig
	if f.Size != nil {
		c.MinPixels, c.MaxPixels = f.Size.ShortestEdge, f.Size.LongestEdge
	}
	if f.MinPixels != nil {
		c.MinPixels = *f.MinPixels
	}
	if f.MaxPixels != nil {
		c.MaxPixels = *f.MaxPixels
	}
	if c.RescaleFactor == 0 {
		c.RescaleFactor = 1.0 / 255
	}
	return modelcfg.Valid(c)
}

// LoadProcessorConfig reads dir/preprocessor_config.json (dir may also be the file itself).
func LoadProcessorConfig(path string) (ProcessorConfig, error) {
	return modelcfg.Read(path, ParseProcessorConfig, "qwen3vl", "preprocessor_config.json")
}

// Validate checks the processor geometry.
func (c ProcessorConfig) Validate() error {
	var bad modelcfg.Problems
	bad.Positive("patch_size", c.PatchSize)
	bad.Positive("temporal_patch_size", c.TemporalPatchSize)
	bad.Positive("merge_size", c.MergeSize)
	// The bounds are areas, not widths: the released longest_edge (16777216) is above
	// modelcfg.MaxSize.
	for _, b := range []struct {
		name string
		v    int
	}{{"size.shortest_edge (min_pixels)", c.MinPixels}, {"size.longest_edge (max_pixels)", c.MaxPixels}} {
		if b.v <= 0 || b.v > maxProcessorPixels {
			bad.Add("%s = %d must be in 1..%d", b.name, b.v, maxProcessorPixels)
		}
	}
	if c.MinPixels > c.MaxPixels {
		bad.Add("size.shortest_edge = %d exceeds size.longest_edge = %d", c.MinPixels, c.MaxPixels)
	}
	for i, s := range c.ImageStd {
		if !(s > 0) {
			bad.Add("image_std[%d] = %g must be positive", i, s)
		}
	}
	return bad.Err("qwen3vl")
}

// Factor is the side every resized image is a multiple of: one merged vision token.
func (c ProcessorConfig) Factor() int { return c.PatchSize * c.MergeSize }

// SmartResize is transformers' smart_resize: the image size (height, width) rounded to multiples of
// Factor, the area kept inside [MinPixels, MaxPixels] with the aspect ratio kept as well as the
// rounding allows (Python's round-half-even and float64 arithmetic, as the reference).
func (c ProcessorConfig) SmartResize(height, width int) (int, int, error) {
	f := c.Factor()
	if height < f || width < f {
		return 0, 0, fmt.Errorf("qwen3vl: image %dx%d (width x height) is smaller than %d pixels on a side; the vision processor needs at least %dx%d",
			width, height, f, f, f)
	}
	if float64(max(height, width))/float64(min(height, width)) > 200 {
		return 0, 0, fmt.Errorf("qwen3vl: image %dx%d has an aspect ratio above 200", width, height)
	}
	ff := float64(f)
	hBar := int(math.RoundToEven(float64(height)/ff)) * f
	wBar := int(math.RoundToEven(float64(width)/ff)) * f
	switch {
	case hBar*wBar > c.MaxPixels:
		beta := math.Sqrt(float64(height*width) / float64(c.MaxPixels))
		hBar = max(f, int(math.Floor(float64(height)/beta/ff))*f)
		wBar = max(f, int(math.Floor(float64(width)/beta/ff))*f)
	case hBar*wBar < c.MinPixels:
		beta := math.Sqrt(float64(c.MinPixels) / float64(height*width))
		hBar = int(math.Ceil(float64(height)*beta/ff)) * f
		wBar = int(math.Ceil(float64(width)*beta/ff)) * f
	}
	return hBar, wBar, nil
}

// PixelValues turns one image, already resized to a SmartResize size (interleaved RGB8, height x
// width x 3), into the vision tower's input as the Qwen2-VL image processor lays it out: rescaled and
// normalized per channel, the single frame repeated to fill the temporal patch, then flattened into
// rows ordered (t, merged row, merged column, row in the merge block, column in it) with features
// (channel, temporal, y, x). It returns the rows [grid_t*grid_h*grid_w, PatchDim] and grid_thw.
func (c ProcessorConfig) PixelValues(rgb []uint8, width, height int) ([]float32, [3]int, error) {
	p, m, tp := c.PatchSize, c.MergeSize, c.TemporalPatchSize
	if width <= 0 || height <= 0 || len(rgb) != width*height*3 {
		return nil, [3]int{}, fmt.Errorf("qwen3vl: %d bytes are not a %dx%d RGB8 image", len(rgb), width, height)
	}
	if height%(p*m) != 0 || width%(p*m) != 0 {
		return nil, [3]int{}, fmt.Errorf("qwen3vl: image %dx%d is not a multiple of %d on both sides: resize it to SmartResize's size first", width, height, p*m)
	}
	norm := make([]float32, 3*width*height) // planar, normalized
	for ch := 0; ch < 3; ch++ {
		mean, std := float32(c.ImageMean[ch]), float32(c.ImageStd[ch])
		for i := 0; i < width*height; i++ {
			scaled := float32(float64(rgb[3*i+ch]) * c.RescaleFactor)
			norm[ch*width*height+i] = (scaled - mean) / std
		}
	}
	gh, gw := height/p, width/p
	dim := 3 * tp * p * p
	out := make([]float32, gh*gw*dim)
	row := 0
	for bh := 0; bh < gh/m; bh++ {
		for bw := 0; bw < gw/m; bw++ {
			for mh := 0; mh < m; mh++ {
				for mw := 0; mw < m; mw++ {
					y0, x0 := (bh*m+mh)*p, (bw*m+mw)*p
					dst := out[row*dim:][:dim]
					k := 0
					for ch := 0; ch < 3; ch++ {
						for t := 0; t < tp; t++ { // every temporal slot repeats the one frame
							for y := 0; y < p; y++ {
								copy(dst[k:k+p], norm[ch*width*height+(y0+y)*width+x0:][:p])
								k += p
							}
						}
					}
					row++
				}
			}
		}
	}
	return out, [3]int{1, gh, gw}, nil
}

// Process is the image processor on one RGB image: SmartResize's size, Pillow's BICUBIC resize
// (the processor's resample=3; transformers' own resize lands within one level of Pillow's), then
// PixelValues. It returns the vision tower's rows and grid_thw.
func (c ProcessorConfig) Process(img imageops.Image) ([]float32, [3]int, error) {
	h, w, err := c.SmartResize(img.Height, img.Width)
	if err != nil {
		return nil, [3]int{}, err
	}
	resized, err := imageops.ResizePILBicubic(img, w, h)
	if err != nil {
		return nil, [3]int{}, fmt.Errorf("qwen3vl: %w", err)
	}
	return c.PixelValues(resized.Pix, w, h)
}

// Tokens is how many vision tokens an image of grid_thw becomes (one per merged block).
func (c ProcessorConfig) Tokens(grid [3]int) int {
	return grid[0] * grid[1] * grid[2] / (c.MergeSize * c.MergeSize)
}

// Q32BProcessor is the Qwen3-VL image processor's preprocessor_config.json (patch 16, merge 2,
// mean and std 0.5, size {shortest_edge: 65536, longest_edge: 16777216}, read by transformers'
// Qwen2VLImageProcessor as min_pixels and max_pixels), for plans and random-weight runs; real
// runs read the snapshot's processor/. The bounds are the released Qwen3-VL image processor's
// (huggingface.co/Qwen/Qwen3-VL-32B-Instruct/blob/main/preprocessor_config.json, the same in every
// Qwen3-VL size; the video processor's own 4096..25165824 do not apply to images).
func Q32BProcessor() ProcessorConfig {
	return ProcessorConfig{PatchSize: 16, TemporalPatchSize: 2, MergeSize: 2, ImageMean: [3]float64{0.5, 0.5, 0.5},
		ImageStd: [3]float64{0.5, 0.5, 0.5}, RescaleFactor: 1.0 / 255, MinPixels: 65536, MaxPixels: 16777216}
}
