package modelkit

import (
	"fmt"

	"fastvideo/internal/graphexec"

	"github.com/gomlx/compute"
	"github.com/gomlx/gomlx/core/tensors"
)

// RopeCache keeps the device RoPE tables of the last geometry: every step of a generation uses the
// same one, and comparing it is far cheaper than recomputing and uploading 2·L·width cos/sin values.
type RopeCache[K any] struct {
	// Device is where the tables are uploaded (0 unless the model runs on another device).
	Device   compute.DeviceNum
	equal    func(a, b K) bool
	key      K
	cos, sin *tensors.Tensor
}

// NewRopeCache makes an empty cache whose geometries compare with equal.
func NewRopeCache[K any](equal func(a, b K) bool) *RopeCache[K] { return &RopeCache[K]{equal: equal} }

// Tables returns the device tables [rows, width] for key, computing them with tables (host cos, sin)
// and uploading them when key differs from the cached geometry.
func (c *RopeCache[K]) Tables(backend compute.Backend, key K, rows, width int, tables func() (cos, sin []float32)) (cos, sin *tensors.Tensor, err error) {
	if c.cos != nil && c.equal(c.key, key) {
		return c.cos, c.sin, nil
	}
	c.Finalize()
	cosH, sinH := tables()
	cos, sin = tensors.FromFlatDataAndDimensions(cosH, rows, width), tensors.FromFlatDataAndDimensions(sinH, rows, width)
	if err := graphexec.UploadTo(backend, c.Device, cos, sin); err != nil {
		return nil, nil, fmt.Errorf("RoPE tables: %w", err)
	}
	c.key, c.cos, c.sin = key, cos, sin
	return cos, sin, nil
}

// Finalize frees the cached tables.
func (c *RopeCache[K]) Finalize() {
	if c != nil && c.cos != nil {
		graphexec.Finalize(c.cos, c.sin)
		c.cos, c.sin = nil, nil
	}
}
