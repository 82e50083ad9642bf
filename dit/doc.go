// Package dit groups the diffusion transformers: dit/h3 (MiniMax H3, joint
// audio+video) and, later, dit/wan (Wan2.1/2.2). Each model lives in its own
// subpackage so that a program links only the models it uses.
package dit
