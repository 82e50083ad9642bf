// Package dit groups the diffusion transformers: dit/h3 (MiniMax H3, joint audio+video) and dit/wan
// (Wan2.1/2.2 and their FastWan students). Each model lives in its own subpackage so that a program
// links only the models it uses; their shared lifecycle is internal/modelkit.
package dit
