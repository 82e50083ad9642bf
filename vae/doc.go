// Package vae groups the latent decoders: vae/h3video (H3 ViT video VAE, decoded
// one temporal clip and spatial tile at a time) and vae/h3audio (H3 stereo audio
// VAE). They are subpackages so that each keeps its own config and weights table.
package vae
