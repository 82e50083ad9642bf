// Package vae groups the latent decoders (and their encoders): vae/h3video (H3 ViT video VAE, decoded
// one temporal clip and spatial tile at a time), vae/h3audio (H3 stereo audio VAE), vae/wan (the
// Wan2.1/2.2 causal video VAE, decoded one latent frame at a time) and vae/taehv (the TAEHV tiny
// decoder for Wan and H3 latents, for previews and cheap decodes). They are subpackages so that each
// keeps its own config and weights table.
package vae
