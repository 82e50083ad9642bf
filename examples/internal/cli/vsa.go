package cli

import (
	"flag"

	"fastvideo/fastvideo"
)

// VSAFlags are the attention flags of a family with VSA-trained students (-dense-attention, -vsa,
// -vsa-sparsity): both binaries take them with the same meaning, and each family sets its own
// Options.VSA from them.
type VSAFlags struct {
	dense, on *bool
	sparsity  *float64
}

// DefineVSA registers the flags; student names the distilled models in the help ("FastWan") and
// sparsityDefault says what -vsa-sparsity defaults to.
func DefineVSA(fs *flag.FlagSet, student, sparsityDefault string) VSAFlags {
	return VSAFlags{
		dense:    fs.Bool("dense-attention", false, student+": dense attention instead of the Video Sparse Attention the students were trained with (the default in a build without the block-sparse kernel, where it is faster; the GPU build has the kernel and runs VSA by default, see BENCHMARKS.md)"),
		on:       fs.Bool("vsa", false, student+": Video Sparse Attention as trained (the gates used), at the checkpoint's sparsity unless -vsa-sparsity"),
		sparsity: fs.Float64("vsa-sparsity", 0, student+": VSA sparsity in [0, 1) (default: "+sparsityDefault+")"),
	}
}

// Chooses says whether the flags pick an attention (dense, or VSA on or at a sparsity), which
// another attention choice excludes.
func (f VSAFlags) Chooses(set map[string]bool) bool {
	return *f.dense || *f.on || set["vsa-sparsity"]
}

// Apply refuses -dense-attention beside -vsa or -vsa-sparsity, and hands use what the flags ask
// when any is given (off: dense attention; sparsity nil: the checkpoint's).
func (f VSAFlags) Apply(set map[string]bool, use func(off bool, sparsity *float64)) error {
	if *f.dense && (*f.on || set["vsa-sparsity"]) {
		return &fastvideo.RequestError{Field: "vsa", Value: "-dense-attention with -vsa/-vsa-sparsity", Allowed: "one of -dense-attention or -vsa"}
	}
	if set["dense-attention"] || set["vsa-sparsity"] || *f.on {
		var sparsity *float64
		if set["vsa-sparsity"] {
			sparsity = fastvideo.Ptr(*f.sparsity)
		}
		use(*f.dense, sparsity)
	}
	return nil
}
