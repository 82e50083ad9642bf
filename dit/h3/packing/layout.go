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
// float64 positions are bit-identical to the reference.
func Build(req Request) (*Layout, error) {
	patch := patchOrDefault(req.PatchSize)
	tags, scale, err := checkRequest(req, patch)
	if err != nil {
		return nil, err
	}
	hp, wp := req.LatentHeight/patch[1], req.LatentWidth/patch[2]
	rowsPerFrame := hp * wp
	tp := req.LatentFrames / patch[0]
	S := len(tags)
	numCond := len(req.Keyframes) * rowsPerFrame
	numAudio := req.AudioLatents * AudioChannels
	numVideo := tp * rowsPerFrame
	L := S + numCond + numAudio + numVideo

	l := &Layout{
		SequenceLength: L, NumTextRows: S, NumConditionVideoRows: numCond, NumAudioRows: numAudio,
		NumVideoRows: numVideo, RowsPerFrame: rowsPerFrame,
		LatentFrames: req.LatentFrames, LatentHeight: req.LatentHeight, LatentWidth: req.LatentWidth,
		AudioLatents: req.AudioLatents, PatchSize: patch,
		PositionIDs: make([][3]float64, L), TokenTags: make([]uint8, L),
	}
	l.placePositions(req, tp, scale)
	copy(l.TokenTags, tags)
	l.TextIndices = arange(0, S)
	l.AudioIndices = arange(l.AudioStart(), l.VideoStart())
	l.VideoIndices = append(arange(l.ConditionStart(), l.AudioStart()), arange(l.VideoStart(), L)...)
	for _, i := range l.AudioIndices {
		l.TokenTags[i] = TagAudio
	}
	for _, i := range l.VideoIndices {
		l.TokenTags[i] = TagVideo
	}
	return l, nil
}

// checkRequest validates req and returns its text token tags (all text when not given) and its
// video temporal scale (1 when not given).
func checkRequest(req Request, patch [3]int) (tags []uint8, scale float64, err error) {
	if patch[0] <= 0 || patch[1] <= 0 || patch[2] <= 0 {
		return nil, 0, fmt.Errorf("packing: patch size must be positive, got %v", patch)
	}
	if tags, err = textTags(req); err != nil {
		return nil, 0, err
	}
	if req.LatentFrames <= 0 || req.LatentHeight <= 0 || req.LatentWidth <= 0 || req.AudioLatents < 0 {
		return nil, 0, fmt.Errorf("packing: latent geometry must be positive, got T=%d H=%d W=%d audio=%d",
			req.LatentFrames, req.LatentHeight, req.LatentWidth, req.AudioLatents)
	}
	if req.LatentFrames%patch[0] != 0 || req.LatentHeight%patch[1] != 0 || req.LatentWidth%patch[2] != 0 {
		return nil, 0, fmt.Errorf("packing: latent grid %dx%dx%d is not divisible by the patch %v",
			req.LatentFrames, req.LatentHeight, req.LatentWidth, patch)
	}
	scale = req.VideoTemporalScale
	if scale == 0 {
		scale = 1
	}
	if !(scale > 0) || math.IsInf(scale, 0) {
		return nil, 0, fmt.Errorf("packing: VideoTemporalScale must be positive and finite, got %g", req.VideoTemporalScale)
	}
	if len(req.Keyframes) > 0 && scale != 1 {
		return nil, 0, fmt.Errorf("packing: a video temporal scale is supported only without keyframe anchors")
	}
	for _, a := range req.Keyframes {
		if a != AnchorFirst && a != AnchorLast {
			return nil, 0, fmt.Errorf("packing: a keyframe anchor must be %q or %q, got %q", AnchorFirst, AnchorLast, a)
		}
	}
	return tags, scale, nil
}

// textTags returns the request's text token tags: the given ones (text or vision only), or
// NumTextTokens text tags.
func textTags(req Request) ([]uint8, error) {
	tags := req.TextTokenTags
	switch {
	case tags == nil:
		if req.NumTextTokens < 0 {
			return nil, fmt.Errorf("packing: NumTextTokens must be >= 0, got %d", req.NumTextTokens)
		}
		tags = make([]uint8, req.NumTextTokens)
		for i := range tags {
			tags[i] = TagText
		}
	case req.NumTextTokens != 0 && req.NumTextTokens != len(tags):
		return nil, fmt.Errorf("packing: NumTextTokens=%d but %d text token tags were given", req.NumTextTokens, len(tags))
	}
	for i, t := range tags {
		if t != TagText && t != TagVideo {
			return nil, fmt.Errorf("packing: text token %d has tag %d; only text (%d) and vision (%d) tags are allowed",
				i, t, TagText, TagVideo)
		}
	}
	return tags, nil
}

// placePositions writes the RoPE coordinates of every row: text rows along t, keyframe rows at their
// anchor's time, the two audio channels at the left and right edge, video rows on the (scaled)
// temporal grid.
func (l *Layout) placePositions(req Request, tp int, scale float64) {
	S, patch, rowsPerFrame := l.NumTextRows, l.PatchSize, l.RowsPerFrame
	wp := req.LatentWidth / patch[2]
	for i := 0; i < S; i++ {
		l.PositionIDs[i] = [3]float64{float64(i), 0, 0}
	}
	sqrtArea := SqrtArea(req.LatentHeight, req.LatentWidth)
	hgrid := SpatialGrid(req.LatentHeight, patch[1], sqrtArea)
	wgrid := SpatialGrid(req.LatentWidth, patch[2], sqrtArea)
	origin := float64(S)

	for k, a := range req.Keyframes {
		t := origin
		if a == AnchorLast {
			t = origin + TemporalSpan(req.LatentFrames)
			t = t - FrameRescale
		}
		base := l.ConditionStart() + k*rowsPerFrame
		for r := 0; r < rowsPerFrame; r++ {
			l.PositionIDs[base+r] = [3]float64{t, hgrid[r/wp], wgrid[r%wp]}
		}
	}
	for ch := 0; ch < AudioChannels; ch++ {
		w := wgrid[0]
		if ch == 1 {
			w = wgrid[len(wgrid)-1]
		}
		for k := 0; k < req.AudioLatents; k++ {
			l.PositionIDs[l.AudioStart()+ch*req.AudioLatents+k] = [3]float64{origin + float64(k), 0, w}
		}
	}
	tgrid := TemporalGrid(tp, origin, scale)
	for j := 0; j < tp; j++ {
		base := l.VideoStart() + j*rowsPerFrame
		for r := 0; r < rowsPerFrame; r++ {
			l.PositionIDs[base+r] = [3]float64{tgrid[j], hgrid[r/wp], wgrid[r%wp]}
		}
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
