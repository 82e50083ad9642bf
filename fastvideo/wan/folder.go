package wan

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	wandit "fastvideo/dit/wan"
	"fastvideo/dit/wan/geometry"
	"fastvideo/fastvideo/family"
	"fastvideo/fastvideo/familykit"
	"fastvideo/internal/textenc/umt5"
	wanvae "fastvideo/vae/wan"
)

// The Wan snapshot's own parts (Wan-AI/Wan2.1-T2V-1.3B-Diffusers' layout), beside family.Dir*.
const (
	modelIndex       = "model_index.json"
	dirTransformer2  = "transformer_2"
	transformerClass = "WanTransformer3DModel"
)

// Detect recognizes a Wan snapshot by model_index.json's pipeline class or its transformer's class.
func (Family) Detect(dir string) (bool, error) {
	ok, _, err := detect(dir)
	return ok, err
}

// ReadFolder reads a Wan snapshot's configs (see readFolder).
func (Family) ReadFolder(dir string) (family.Model, error) {
	_, cls, err := detect(dir)
	if err != nil {
		return nil, err
	}
	return readFolder(dir, cls)
}

// FolderLayout names the files of a Wan snapshot.
func (Family) FolderLayout() string {
	return fmt.Sprintf("a Wan snapshot holds %s (a Wan pipeline class), %s/config.json, %s/config.json, %s/config.json and %s/",
		modelIndex, familykit.DirTransformer, familykit.DirVAE, familykit.DirTextEncoder, familykit.DirTokenizer)
}

// classNameOf reads the "_class_name" of a JSON config; "" when the file does not exist.
func classNameOf(path string) (string, error) {
	var c struct {
		ClassName string `json:"_class_name"`
	}
	if err := familykit.ReadConfigJSON(path, &c); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", nil
		}
		return "", err
	}
	return c.ClassName, nil
}

// detect tells a Wan snapshot from a MiniMax H3 one by model_index.json's pipeline class
// (WanPipeline, WanDMDPipeline, ...) or, without it, the transformer's class. It returns the
// pipeline class ("" without model_index.json) for ReadFolder, which needs it too.
func detect(dir string) (isWan bool, pipeline string, err error) {
	if pipeline, err = classNameOf(filepath.Join(dir, modelIndex)); err != nil {
		return false, "", err
	}
	if pipeline != "" {
		return strings.HasPrefix(pipeline, "Wan"), pipeline, nil
	}
	cls, err := classNameOf(filepath.Join(dir, familykit.DirTransformer, "config.json"))
	if err != nil {
		return false, "", err
	}
	return cls == transformerClass, "", nil
}

// readFolder reads a Wan snapshot's configs only (transformer/, vae/, text_encoder/ config.json
// and model_index.json) and checks that they agree: VAE latent channels = the DiT's in_channels,
// UMT5 width = the DiT's text_dim. The variant, and with it the presets and the flow shift, follows
// from the configs: a DMD pipeline class (WanDMDPipeline) or a path naming FastWan selects the
// FastWan presets; 48 input channels the Wan2.2 TI2V-5B ones; a 5120-wide DiT the 14B ones; any
// other 16-channel DiT the 1.3B ones. cls is model_index.json's pipeline class, as detect
// read it.
func readFolder(dir, cls string) (*Spec, error) {
	if _, err := os.Stat(filepath.Join(dir, dirTransformer2)); err == nil {
		return nil, fmt.Errorf("fastvideo: %s has %s/: Wan2.2 A14B (two mixture-of-experts transformers) is not supported; "+
			"use a Wan2.1 T2V, Wan2.2 TI2V-5B or FastWan snapshot", dir, dirTransformer2)
	}
	if strings.Contains(strings.ToLower(cls), "imagetovideo") || strings.Contains(strings.ToLower(cls), "i2v") {
		return nil, fmt.Errorf("fastvideo: %s: pipeline %q is image-to-video, which is not supported; use a text-to-video snapshot", dir, cls)
	}
	dit, err := wandit.ReadConfig(filepath.Join(dir, familykit.DirTransformer))
	if err != nil {
		return nil, familykit.MissingOr(dir, "Wan", filepath.Join(familykit.DirTransformer, "config.json"), err)
	}
	vae, err := wanvae.LoadConfig(filepath.Join(dir, familykit.DirVAE))
	if err != nil {
		return nil, familykit.MissingOr(dir, "Wan", filepath.Join(familykit.DirVAE, "config.json"), err)
	}
	if vae.ZDim != dit.InChannels || dit.OutChannels != dit.InChannels {
		return nil, fmt.Errorf("fastvideo: %s: the VAE's z_dim %d must equal the transformer's in_channels %d and out_channels %d "+
			"(text-to-video; 36- or 96-channel transformers take image or video conditions, which are not supported)",
			filepath.Join(dir, familykit.DirVAE, "config.json"), vae.ZDim, dit.InChannels, dit.OutChannels)
	}
	te, err := umt5.LoadConfig(filepath.Join(dir, familykit.DirTextEncoder))
	if err != nil {
		return nil, familykit.MissingOr(dir, "Wan", filepath.Join(familykit.DirTextEncoder, "config.json"), err)
	}
	if te.DModel != dit.TextDim {
		return nil, fmt.Errorf("fastvideo: the text encoder's d_model %d (%s) differs from the transformer's text_dim %d",
			te.DModel, filepath.Join(dir, familykit.DirTextEncoder, "config.json"), dit.TextDim)
	}

	// The whole path, not the base name: a Hugging Face cache keeps the repository name above the
	// snapshot hash (models--FastVideo--FastWan2.1-T2V-1.3B-Diffusers/snapshots/<hash>).
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	dmd := strings.Contains(strings.ToLower(cls), "dmd") || strings.Contains(strings.ToLower(abs), "fastwan")
	name := "wan2.1-t2v-1.3b"
	switch {
	case dit.InChannels == 48 && dmd:
		name = "fastwan2.2-ti2v-5b"
	case dit.InChannels == 48:
		name = "wan2.2-ti2v-5b"
	case dit.HiddenSize() == 5120 && dmd:
		name = "fastwan2.1-t2v-14b-480p"
	case dit.HiddenSize() == 5120:
		name = "wan2.1-t2v-14b"
	case dmd:
		name = "fastwan2.1-t2v-1.3b"
	}
	var v variant
	for _, c := range variants {
		if c.name == name {
			v = c
		}
	}
	m := v.spec()
	m.Name, m.Dir = dir, dir
	// The FastWan2.2-5B id also names a full-attention student: the weights decide.
	if m.VSAGates, err = familykit.HasVSAGates(filepath.Join(dir, familykit.DirTransformer)); err != nil {
		return nil, err
	}
	m.Description = fmt.Sprintf("%s read from %s", strings.SplitN(v.description, " (", 2)[0], dir)
	m.DiT, m.VAE, m.TextEncoder = dit, vae, te
	switch {
	case cls == "":
		m.Notes = append(m.Notes, fmt.Sprintf("%s missing: pipeline class taken as %s", filepath.Join(dir, modelIndex),
			map[bool]string{true: "WanDMDPipeline (the path names FastWan)", false: "WanPipeline"}[dmd]))
	case dmd && !strings.Contains(strings.ToLower(cls), "dmd"):
		m.Notes = append(m.Notes, fmt.Sprintf("pipeline class %s, but the path names FastWan: the DMD sampler and the %s preset apply", cls, v.preset))
	}
	if d := dit.HiddenSize(); dit.InChannels == 16 && d != 1536 && d != 5120 {
		m.Notes = append(m.Notes, fmt.Sprintf("transformer width %d is neither 1.3B (1536) nor 14B (5120): the %s presets apply", d, v.preset))
	}
	return m, nil
}

// geometryVAE is the geometry package's view of a Wan VAE config.
func geometryVAE(c wanvae.Config) geometry.VAE {
	name := "Wan2.1"
	if c.IsResidual || c.PatchSize > 1 {
		name = "Wan2.2"
	}
	return geometry.VAE{Name: name, TemporalRatio: c.TemporalRatio(), SpatialRatio: c.SpatialRatio(), LatentChannels: c.ZDim}
}
