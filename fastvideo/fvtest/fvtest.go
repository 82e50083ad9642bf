// Package fvtest holds the helpers that tests driving the SDK through its public API share (a
// family's external tests, package <family>_test): opening a model on the test backend, a
// latents-only run, a run in a generator of its own, New's error for a model. Like
// net/http/httptest, only tests import it (internal/archtest enforces that).
package fvtest

import (
	"context"
	"errors"
	"testing"

	"fastvideo/fastvideo"
	"fastvideo/internal/testutil"
)

// Open opens model (a built-in name or a folder) on the test backend; Close runs at the test's end.
func Open(t *testing.T, model string) *fastvideo.VideoGenerator {
	t.Helper()
	g, err := fastvideo.New(context.Background(), model, fastvideo.WithBackend(testutil.BackendSpec()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Close(); err != nil {
			t.Error(err)
		}
	})
	return g
}

// Generate opens model with opts on the test backend, runs req once and closes the generator before
// it returns, so that runs with different weights (seeds, dtypes) never hold two models at once.
func Generate(t *testing.T, model string, req fastvideo.Request, opts ...fastvideo.Option) *fastvideo.Result {
	t.Helper()
	opts = append([]fastvideo.Option{fastvideo.WithBackend(testutil.BackendSpec())}, opts...)
	g, err := fastvideo.New(context.Background(), model, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := g.Close(); err != nil {
			t.Error(err)
		}
	}()
	res, err := g.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// LatentsOnly runs req without decoding or saving and returns its result with the latents.
func LatentsOnly(t *testing.T, g *fastvideo.VideoGenerator, req fastvideo.Request) *fastvideo.Result {
	t.Helper()
	req.SkipSave, req.ReturnLatents = true, true
	res, err := g.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if res.Latents == nil || len(res.Latents.Video) == 0 {
		t.Fatal("a latents-only run returned no latents")
	}
	return res
}

// NewError is New's error for model (nil: New succeeded, and the generator is closed again).
func NewError(model string) error {
	g, err := fastvideo.New(context.Background(), model, fastvideo.WithBackend(testutil.BackendSpec()))
	if err == nil {
		return g.Close()
	}
	return err
}

// IsModelError reports whether err is invalid input for the model field.
func IsModelError(err error) bool {
	var re *fastvideo.RequestError
	return errors.As(err, &re) && re.Field == "model"
}
