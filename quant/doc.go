// Package quant holds MLX-compatible affine INT8/INT6/INT4 weights (group 64
// along the input dimension), the linear-layer dispatch that runs them in a
// GoMLX graph, and a model-neutral converted checkpoint (one safetensors file
// and a JSON manifest in a folder, as MLX converters write them): a model
// package names its files and tensor mapping (Format), chooses the matrices to
// quantize (Conversion) and keeps its own manifest entries (Manifest.Metadata).
//
// Host side: Quantize reproduces MLX's affine_quantize exactly (float32
// arithmetic, round half to even, scales and biases rounded to the stored
// dtype); Pack/Unpack use MLX's layout (each row one little-endian bit stream
// in uint32 words: 8 and 4 bits are 4 and 8 values a word, 6 bits are 4 values
// per 3 bytes); Affine.Dequantize is the reference scale·q + bias.
//
// Graph side: a quantized weight is three graph inputs (words, scales, biases;
// a GraphWeight). UnpackCodes and Dequantize rebuild the codes and the weights
// with shifts and masks in the graph. Linear computes x·wᵀ by one of two paths:
//
//   - PathQuantized never forms scale·q + bias: x [M, G, 64] is contracted with
//     the integer codes (exact in any float dtype) into float32 per group,
//     scaled, and the bias term (Σ_j x)·bias is added. Used for small row counts.
//   - PathDequantGEMM dequantizes the weight to the compute dtype and runs one
//     dense GEMM. Used from a row-count floor on (DefaultDQGEMMFloor).
//
// A Dispatch value, passed down through the models' options, forces a path or
// moves the floor (binaries parse FASTVIDEO_DQ_GEMM into one with
// ParseDispatch); the path chosen for each linear is logged with log/slog at
// Debug level.
//
// MLX's block-scaled float modes (mxfp8, mxfp4, nvfp4; floatmodes.go) are
// read, not run packed: a converted checkpoint in one of them presents each
// quantized weight as its float32 dequantization, so models bind it dense.
//
// Models declare weights with Declare (dense or quantized, from the checkpoint's
// SchemeOf) and hold a *Weight; a *Checkpoint is a weights.Source under the
// model's names.
package quant
