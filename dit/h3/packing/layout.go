package packing

import (
	"fmt"
	"math"
	"sort"
)

// Anchor places an FL2VA keyframe: its condition rows sit at the time of the
// first or of the last latent frame.
type Anchor string

const (
	AnchorFirst Anchor = "first"
	AnchorLast  Anchor = "last"
)

// Request describes one packed joint sequence.
type Request struct {
	// TextTokenTags holds one tag per prompt token: TagText, or TagVideo for
	// vision placeholder tokens (FL2VA/Ref2VA prompts). Nil means
	// NumTextTokens tokens, all TagText (T2VA).
	TextTokenTags []uint8
	// NumTextTokens is the prompt length; when TextTokenTags is set it may be
	// zero or must equal len(TextTokenTags).
	NumTextTokens int

	LatentFrames, LatentHeight, LatentWidth int
	AudioLatents                            int    // per channel
	PatchSize                               [3]int // zero value: DefaultPatchSize

	// Keyframes adds one frame of condition video rows per anchor, in order.
	Keyframes []Anchor
	// VideoTemporalScale stretches video RoPE times (MLX temporal fast mode);
	// zero means 1. Only valid without keyframes.
	VideoTemporalScale float64
}

// Layout is a packed joint sequence: rows [text | condition video | audio ch0 |
// audio ch1 | target video]. Index lists are int32 (the reference narrows the
// same values from int64).
type Layout struct {
	SequenceLength int

	NumTextRows           int
	NumConditionVideoRows int
	NumConditionAudioRows int // always 0 for T2VA/FL2VA
	NumAudioRows          int // both channels
	NumVideoRows          int // target video rows, without condition rows
	RowsPerFrame          int

	LatentFrames, LatentHeight, LatentWidth int
	AudioLatents                            int
	PatchSize                               [3]int

	// PositionIDs are the (t, h, w) RoPE coordinates of every row, float64 as
	// the reference builds them (the DiT rounds them to float32 before use).
	PositionIDs [][3]float64
	// TokenTags is the modality of every row (TagVideo, TagText, TagAudio).
	TokenTags []uint8
	// VideoIndices lists condition video rows then target video rows;
	// AudioIndices the audio rows (channel 0 then channel 1); TextIndices the
	// text rows. Together they partition [0, SequenceLength).
	VideoIndices []int32
	AudioIndices []int32
	TextIndices  []int32
}

// Offsets of the row groups.
func (l *Layout) ConditionStart() int { return l.NumTextRows }
func (l *Layout) AudioStart() int     { return l.NumTextRows + l.NumConditionVideoRows }
func (l *Layout) VideoStart() int     { return l.AudioStart() + l.NumAudioRows }

// Build packs one request. It reproduces build_packed_sequence (and the MLX
// build_packed_layout for a temporal scale) exactly: integers, tags and
// float64 positions are bit-identical to the reference. Requests beyond
// MaxTextTokens or MaxSequenceLength rows are rejected before anything is
// allocated.
func Build(req Request) (*Layout, error) {
	patch := patchOrDefault(req.PatchSize)
	tags, err := textTokenTags(req)
	if err != nil {
		return nil, err
	}
	if err := checkGrid(req, patch); err != nil {
		return nil, err
	}
	scale, err := temporalScale(req)
	if err != nil {
		return nil, err
	}
	l, err := newLayout(req, len(tags), patch)
	if err != nil {
		return nil, err
	}
	l.placePositions(req, scale)
	l.tagRows(tags)
	return l, nil
}

// textTokenTags resolves the prompt's token tags (nil: NumTextTokens text
// tags) and checks them.
func textTokenTags(req Request) ([]uint8, error) {
	tags := req.TextTokenTags
	switch {
	case tags == nil:
		if req.NumTextTokens < 0 || req.NumTextTokens > MaxTextTokens {
			return nil, fmt.Errorf("packing: NumTextTokens must be 0 to %d, got %d", MaxTextTokens, req.NumTextTokens)
		}
		tags = make([]uint8, req.NumTextTokens)
		for i := range tags {
			tags[i] = TagText
		}
	case req.NumTextTokens != 0 && req.NumTextTokens != len(tags):
		return nil, fmt.Errorf("packing: NumTextTokens=%d but %d text token tags were given", req.NumTextTokens, len(tags))
	case len(tags) > MaxTextTokens:
		return nil, fmt.Errorf("packing: %d text token tags, above the %d a prompt may hold", len(tags), MaxTextTokens)
	}
	for i, t := range tags {
		if t != TagText && t != TagVideo {
			return nil, fmt.Errorf("packing: text token %d has tag %d; only text (%d) and vision (%d) tags are allowed",
				i, t, TagText, TagVideo)
		}
	}
	return tags, nil
}

// checkGrid checks the patch, the latent grid and the keyframe anchors.
func checkGrid(req Request, patch [3]int) error {
	if patch[0] <= 0 || patch[1] <= 0 || patch[2] <= 0 {
		return fmt.Errorf("packing: patch size must be positive, got %v", patch)
	}
	if req.LatentFrames <= 0 || req.LatentHeight <= 0 || req.LatentWidth <= 0 || req.AudioLatents < 0 {
		return fmt.Errorf("packing: latent geometry must be positive, got T=%d H=%d W=%d audio=%d",
			req.LatentFrames, req.LatentHeight, req.LatentWidth, req.AudioLatents)
	}
	if req.LatentFrames%patch[0] != 0 || req.LatentHeight%patch[1] != 0 || req.LatentWidth%patch[2] != 0 {
		return fmt.Errorf("packing: latent grid %dx%dx%d is not divisible by the patch %v",
			req.LatentFrames, req.LatentHeight, req.LatentWidth, patch)
	}
	for _, a := range req.Keyframes {
		if a != AnchorFirst && a != AnchorLast {
			return fmt.Errorf("packing: a keyframe anchor must be %q or %q, got %q", AnchorFirst, AnchorLast, a)
		}
	}
	return nil
}

// temporalScale resolves VideoTemporalScale (zero means 1). A stretched clip
// never spans more than MaxNumFrames frames, so no valid scale exceeds that.
func temporalScale(req Request) (float64, error) {
	scale := req.VideoTemporalScale
	if scale == 0 {
		scale = 1
	}
	if !(scale > 0) || scale > MaxNumFrames {
		return 0, fmt.Errorf("packing: VideoTemporalScale must be positive and at most %d, got %g",
			MaxNumFrames, req.VideoTemporalScale)
	}
	if len(req.Keyframes) > 0 && scale != 1 {
		return 0, fmt.Errorf("packing: a video temporal scale is supported only without keyframe anchors")
	}
	return scale, nil
}

// newLayout counts the row groups, each product checked against
// MaxSequenceLength before it can overflow, and allocates the per-row tables.
func newLayout(req Request, numText int, patch [3]int) (*Layout, error) {
	hp, wp, tp := req.LatentHeight/patch[1], req.LatentWidth/patch[2], req.LatentFrames/patch[0]
	rowsPerFrame, ok1 := boundedProduct(hp, wp)
	numCond, ok2 := boundedProduct(len(req.Keyframes), rowsPerFrame)
	numAudio, ok3 := boundedProduct(req.AudioLatents, AudioChannels)
	numVideo, ok4 := boundedProduct(tp, rowsPerFrame)
	L := numText + numCond + numAudio + numVideo // each term <= MaxSequenceLength: no overflow
	if !ok1 || !ok2 || !ok3 || !ok4 || L > MaxSequenceLength {
		return nil, fmt.Errorf("packing: %d text tokens, %d keyframes, %d audio latents and a %dx%dx%d latent grid pack more than %d rows",
			numText, len(req.Keyframes), req.AudioLatents, req.LatentFrames, req.LatentHeight, req.LatentWidth, MaxSequenceLength)
	}
	return &Layout{
		SequenceLength: L, NumTextRows: numText, NumConditionVideoRows: numCond, NumAudioRows: numAudio,
		NumVideoRows: numVideo, RowsPerFrame: rowsPerFrame,
		LatentFrames: req.LatentFrames, LatentHeight: req.LatentHeight, LatentWidth: req.LatentWidth,
		AudioLatents: req.AudioLatents, PatchSize: patch,
		PositionIDs: make([][3]float64, L), TokenTags: make([]uint8, L),
	}, nil
}

// boundedProduct is a*b for non-negative factors, reporting false when the
// product exceeds MaxSequenceLength.
func boundedProduct(a, b int) (int, bool) {
	if a < 0 || b < 0 || (b != 0 && a > MaxSequenceLength/b) {
		return 0, false
	}
	return a * b, true
}

// placePositions fills the RoPE coordinates of every row group.
func (l *Layout) placePositions(req Request, scale float64) {
	patch := l.PatchSize
	for i := 0; i < l.NumTextRows; i++ {
		l.PositionIDs[i] = [3]float64{float64(i), 0, 0}
	}
	sqrtArea := SqrtArea(req.LatentHeight, req.LatentWidth)
	hgrid := SpatialGrid(req.LatentHeight, patch[1], sqrtArea)
	wgrid := SpatialGrid(req.LatentWidth, patch[2], sqrtArea)
	origin := float64(l.NumTextRows)
	l.placeKeyframes(req, origin, hgrid, wgrid)
	l.placeAudio(origin, wgrid)
	tp := req.LatentFrames / patch[0]
	tgrid := TemporalGrid(tp, origin, scale)
	for j := 0; j < tp; j++ {
		l.placeFrame(l.VideoStart()+j*l.RowsPerFrame, tgrid[j], hgrid, wgrid)
	}
}

// placeKeyframes puts each anchor's condition frame at the time of the first
// or of the last latent frame.
func (l *Layout) placeKeyframes(req Request, origin float64, hgrid, wgrid []float64) {
	for k, a := range req.Keyframes {
		t := origin
		if a == AnchorLast {
			t = origin + TemporalSpan(req.LatentFrames)
			t = t - FrameRescale
		}
		l.placeFrame(l.ConditionStart()+k*l.RowsPerFrame, t, hgrid, wgrid)
	}
}

// placeAudio puts audio latent k of both channels at time origin+k, channel 0
// on the left edge of the width grid and channel 1 on its right edge.
func (l *Layout) placeAudio(origin float64, wgrid []float64) {
	for ch := 0; ch < AudioChannels; ch++ {
		w := wgrid[0]
		if ch == 1 {
			w = wgrid[len(wgrid)-1]
		}
		for k := 0; k < l.AudioLatents; k++ {
			l.PositionIDs[l.AudioStart()+ch*l.AudioLatents+k] = [3]float64{origin + float64(k), 0, w}
		}
	}
}

// placeFrame fills the rows of one video frame starting at base.
func (l *Layout) placeFrame(base int, t float64, hgrid, wgrid []float64) {
	wp := len(wgrid)
	for r := 0; r < l.RowsPerFrame; r++ {
		l.PositionIDs[base+r] = [3]float64{t, hgrid[r/wp], wgrid[r%wp]}
	}
}

// tagRows writes the token tags and the index lists of the row groups.
func (l *Layout) tagRows(tags []uint8) {
	audioStart, videoStart := l.AudioStart(), l.VideoStart()
	copy(l.TokenTags, tags)
	l.TextIndices = arange(0, l.NumTextRows)
	l.AudioIndices = arange(audioStart, videoStart)
	l.VideoIndices = append(arange(l.ConditionStart(), audioStart), arange(videoStart, l.SequenceLength)...)
	for _, i := range l.AudioIndices {
		l.TokenTags[i] = TagAudio
	}
	for _, i := range l.VideoIndices {
		l.TokenTags[i] = TagVideo
	}
}

func arange(start, stop int) []int32 {
	out := make([]int32, 0, max(0, stop-start))
	for i := start; i < stop; i++ {
		out = append(out, int32(i))
	}
	return out
}

// RowTimesteps assigns every row its timestep and returns the sorted distinct
// values with each row's index into them, as build_row_timesteps does with
// torch.unique(sorted=True, return_inverse=True): text and target video rows
// take tVideo, target audio rows tAudio, condition video rows tCondVideo and
// condition audio rows tCondAudio. At most four distinct values exist, so the
// indices fit uint8. adaln_index = idx*3 + tag.
func RowTimesteps(l *Layout, tVideo, tAudio, tCondVideo, tCondAudio float32) (unique []float32, idx []uint8) {
	rows := make([]float32, l.SequenceLength)
	for i := range rows {
		rows[i] = tVideo
	}
	for _, i := range l.VideoIndices[:l.NumConditionVideoRows] {
		rows[i] = tCondVideo
	}
	for _, i := range l.AudioIndices[l.NumConditionAudioRows:] {
		rows[i] = tAudio
	}
	for _, i := range l.AudioIndices[:l.NumConditionAudioRows] {
		rows[i] = tCondAudio
	}
	return uniqueInverse(rows)
}

// uniqueInverse is torch.unique(x, sorted=True, return_inverse=True) for the
// few (at most four) distinct values of a step.
func uniqueInverse(x []float32) ([]float32, []uint8) {
	var uniq []float32
	for _, v := range x {
		found := false
		for _, u := range uniq {
			if u == v {
				found = true
				break
			}
		}
		if !found {
			uniq = append(uniq, v)
		}
	}
	sort.Slice(uniq, func(a, b int) bool { return uniq[a] < uniq[b] })
	idx := make([]uint8, len(x))
	for i, v := range x {
		for k, u := range uniq {
			if u == v {
				idx[i] = uint8(k)
				break
			}
		}
	}
	return uniq, idx
}

// AdaLNIndices is the per-row AdaLN table row, timestep_index*3 + tag.
func AdaLNIndices(idx []uint8, tags []uint8) []int32 {
	out := make([]int32, len(idx))
	for i := range idx {
		out[i] = int32(idx[i])*3 + int32(tags[i])
	}
	return out
}

// ConditionVideoTimestep is the clean time fed to FL2VA condition rows,
// max(tVideo, 0.999) taken in float64 then rounded to float32 as the
// reference does.
func ConditionVideoTimestep(tVideo float32) float32 {
	return float32(math.Max(float64(tVideo), KeyframeNoiseAug))
}
