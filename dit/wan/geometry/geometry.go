// Package geometry is the latent geometry of the Wan family (plain Go): how
// pixel clips map to VAE latents and DiT tokens for the Wan2.1 VAE (4x8x8,
// z=16) and the Wan2.2 VAE (4x16x16, z=48), with the DiT's (1,2,2) patch.
//
//	latent_T = (F-1)/4 + 1, latent_H = H/s, latent_W = W/s   (s = 8 or 16)
//	tokens   = latent_T/pt * latent_H/ph * latent_W/pw
//	decoded frames = 4*(latent_T-1) + 1
//
// Upstream only checks H, W % 8 (so bad shapes fail later, and F = 80 quietly
// yields 77 frames); New rejects them up front.
package geometry

import "fmt"

// VAE is a Wan video VAE's compression.
type VAE struct {
	Name           string
	TemporalRatio  int // frames per latent after the first
	SpatialRatio   int // pixels per latent along each spatial axis
	LatentChannels int
}

var (
	// Wan21 is the Wan2.1 VAE (Wan2.1 1.3B/14B, Wan2.2 A14B experts).
	Wan21 = VAE{Name: "wan2.1", TemporalRatio: 4, SpatialRatio: 8, LatentChannels: 16}
	// Wan22 is the Wan2.2 VAE (Wan2.2 TI2V-5B).
	Wan22 = VAE{Name: "wan2.2", TemporalRatio: 4, SpatialRatio: 16, LatentChannels: 48}
)

// DefaultPatch is the Wan DiT patch (t, h, w).
var DefaultPatch = [3]int{1, 2, 2}

// Geometry is one clip's latent and token grid.
type Geometry struct {
	VAE                                     VAE
	Patch                                   [3]int
	Height, Width, NumFrames                int
	LatentFrames, LatentHeight, LatentWidth int
	TokenFrames, TokenHeight, TokenWidth    int
	Tokens                                  int
}

// New derives the geometry of an H x W x F clip. F must be 4k+1 and H, W
// multiples of the VAE ratio times the patch (16 for Wan2.1, 32 for Wan2.2).
// A zero patch means DefaultPatch.
func New(vae VAE, height, width, numFrames int, patch [3]int) (Geometry, error) {
	if patch == ([3]int{}) {
		patch = DefaultPatch
	}
	if vae.TemporalRatio <= 0 || vae.SpatialRatio <= 0 || patch[0] <= 0 || patch[1] <= 0 || patch[2] <= 0 {
		return Geometry{}, fmt.Errorf("geometry: invalid VAE %+v or patch %v", vae, patch)
	}
	if numFrames < 1 || (numFrames-1)%vae.TemporalRatio != 0 {
		return Geometry{}, fmt.Errorf("geometry: num_frames %d must be %dk+1 (e.g. %d); the VAE would return %d frames",
			numFrames, vae.TemporalRatio, alignFrames(numFrames, vae.TemporalRatio), decoded(numFrames, vae.TemporalRatio))
	}
	mh, mw := vae.SpatialRatio*patch[1], vae.SpatialRatio*patch[2]
	if height <= 0 || width <= 0 || height%mh != 0 || width%mw != 0 {
		return Geometry{}, fmt.Errorf("geometry: %dx%d must be positive multiples of %dx%d for the %s VAE and patch %v",
			height, width, mh, mw, vae.Name, patch)
	}
	g := Geometry{
		VAE: vae, Patch: patch, Height: height, Width: width, NumFrames: numFrames,
		LatentFrames: (numFrames-1)/vae.TemporalRatio + 1,
		LatentHeight: height / vae.SpatialRatio, LatentWidth: width / vae.SpatialRatio,
	}
	if g.LatentFrames%patch[0] != 0 {
		return Geometry{}, fmt.Errorf("geometry: %d latent frames are not divisible by the temporal patch %d", g.LatentFrames, patch[0])
	}
	g.TokenFrames, g.TokenHeight, g.TokenWidth = g.LatentFrames/patch[0], g.LatentHeight/patch[1], g.LatentWidth/patch[2]
	g.Tokens = g.TokenFrames * g.TokenHeight * g.TokenWidth
	return g, nil
}

// LatentShape is [C, T, H, W] of the latent.
func (g Geometry) LatentShape() [4]int {
	return [4]int{g.VAE.LatentChannels, g.LatentFrames, g.LatentHeight, g.LatentWidth}
}

// DecodedFrames is the frame count the VAE decodes from the latent.
func (g Geometry) DecodedFrames() int { return g.VAE.TemporalRatio*(g.LatentFrames-1) + 1 }

func alignFrames(n, r int) int {
	if n < 1 {
		return 1
	}
	return (n-1+r-1)/r*r + 1
}

func decoded(n, r int) int {
	if n < 1 {
		return 0
	}
	return r*((n-1)/r) + 1
}
