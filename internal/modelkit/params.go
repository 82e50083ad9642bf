package modelkit

import (
	"fmt"

	"fastvideo/internal/randweights"
	"fastvideo/internal/weights"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
)

// Release frees a model's parameters, then its executables and device caches, then closes the
// checkpoint it reads from (closeSrc; nil when it owns none).
func Release(set *weights.Set, closeSrc func() error, owned ...Finalizer) error {
	set.Release()
	for _, o := range owned {
		o.Finalize()
	}
	if closeSrc != nil {
		return closeSrc()
	}
	return nil
}

// BindSource binds a model's declared parameters from the checkpoint tensors of src (stored in dt, on
// backend) and then runs finish (executables, derived tensors; nil: nothing); when either fails the
// parameters are released. A bind failure is prefixed with what.
func BindSource(what string, src weights.Source, set *weights.Set, dt dtypes.DType, backend compute.Backend, finish func() error) error {
	return populate(set, func() error {
		if err := weights.Bind(src, set, weights.Options{DType: dt, Backend: backend}); err != nil {
			return fmt.Errorf("%s: binding the weights: %w", what, err)
		}
		return nil
	}, finish)
}

// DrawRandom is BindSource with values drawn on the device (randweights.FillRandom from seed, with
// draw) instead of a checkpoint's.
func DrawRandom(what string, set *weights.Set, dt dtypes.DType, backend compute.Backend, seed int64, draw randweights.Draw, finish func() error) error {
	return populate(set, func() error {
		if err := randweights.FillRandom(backend, set, dt, seed, draw); err != nil {
			return fmt.Errorf("%s: random weights: %w", what, err)
		}
		return nil
	}, finish)
}

// Populate is a model constructor: declare validates the options and declares the parameters, and fill
// binds them (BindSource, DrawRandom). A failure of either returns no model.
func Populate[M any](declare func() (M, error), fill func(M) error) (M, error) {
	var none M
	m, err := declare()
	if err != nil {
		return none, err
	}
	if err := fill(m); err != nil {
		return none, err
	}
	return m, nil
}

func populate(set *weights.Set, fill, finish func() error) error {
	err := fill()
	if err == nil && finish != nil {
		err = finish()
	}
	if err != nil {
		set.Release()
	}
	return err
}
