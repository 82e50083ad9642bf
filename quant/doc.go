// Package quant will hold affine INT8/INT6/INT4 weights (MLX-compatible group-64
// packing) and the GEMM dispatch that chooses between in-graph dequantization and
// a dequantize-then-dense GEMM above a measured row count.
package quant
