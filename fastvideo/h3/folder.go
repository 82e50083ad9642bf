package h3

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	h3dit "fastvideo/dit/h3"
	"fastvideo/dit/h3/packing"
	"fastvideo/fastvideo/family"
	"fastvideo/fastvideo/familykit"
	"fastvideo/internal/safetensors"
	"fastvideo/internal/textenc/qwen3vl"
	"fastvideo/schedule"
	"fastvideo/vae/h3audio"
	"fastvideo/vae/h3video"
)

// The MiniMax H3 snapshot's own parts (MiniMaxAI/MiniMax-H3's layout), beside family.Dir*.
const (
	dirAudioVAE  = "audio_vae"
	contractFile = "fastvideo_inference.json"
	snapshotName = "MiniMax H3"
)

// Detect recognizes an H3 snapshot by its transformer (a config.json or a converted checkpoint's
// manifest) next to an audio_vae/ folder, the part no other family has.
func (Family) Detect(dir string) (bool, error) {
	if !isDir(filepath.Join(dir, dirAudioVAE)) {
		return false, nil
	}
	return isDir(filepath.Join(dir, familykit.DirTransformer)), nil
}

func isDir(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}

// ReadFolder reads an H3 snapshot's configs only: transformer/config.json (or a converted
// checkpoint's manifest), vae/config.json, audio_vae/config.json, scheduler/ and audio_scheduler/
// scheduler_config.json, the transformer's weight index (to detect FastH3's VSA gates), an
// optional AdaLN cache manifest and an optional fastvideo_inference.json. Each is read once here
// and passed down to planning and loading.
func (Family) ReadFolder(dir string) (family.Model, error) {
	s := released()
	s.Name, s.Dir, s.Variant = dir, dir, "h3"
	if err := s.readComponents(dir); err != nil {
		return nil, err
	}
	if err := s.readSchedulers(dir); err != nil {
		return nil, err
	}
	if err := s.readKeyframeConfigs(dir); err != nil {
		return nil, err
	}
	var err error
	if s.VSAGates, err = familykit.HasVSAGates(filepath.Join(dir, familykit.DirTransformer)); err != nil {
		return nil, err
	}
	s.VSA = trainedVSA
	if err := s.readContract(dir); err != nil {
		return nil, err
	}
	if s.VSAGates || s.DMDRungs != nil {
		s.Variant, s.Description = "fasth3", "FastH3 student read from "+dir
		s.setPresets("fasth3_t2va", fastH3Presets)
	} else {
		s.Description = "MiniMax H3 read from " + dir
		s.setPresets("minimax_h3_t2va", baseH3Presets)
	}
	if n := len(s.DMDRungs); n > 0 {
		for i := range s.Presets {
			s.Presets[i].Steps = n
			s.presets[s.Presets[i].Name] = s.Presets[i]
		}
	}
	return s, nil
}

// readComponents reads the DiT, video VAE and audio VAE configs with the model packages' own
// readers and checks that they agree.
func (s *Spec) readComponents(dir string) error {
	var err error
	// The DiT's own reader, so that a converted transformer/ (its config lives in the
	// quantization manifest) reads like a released one.
	if s.DiT, err = h3dit.ReadConfig(filepath.Join(dir, familykit.DirTransformer)); err != nil {
		return familykit.MissingOr(dir, snapshotName, filepath.Join(familykit.DirTransformer, "config.json"), err)
	}
	if s.AdaLN, err = h3dit.ReadAdaLNManifest(filepath.Join(dir, familykit.DirTransformer)); err != nil {
		return err
	}
	if h3dit.IsConverted(filepath.Join(dir, familykit.DirTransformer)) {
		s.DiTStoredBytes = storedBytes(filepath.Join(dir, familykit.DirTransformer))
	}
	if s.VAE, err = h3video.LoadConfig(filepath.Join(dir, familykit.DirVAE)); err != nil {
		return familykit.MissingOr(dir, snapshotName, filepath.Join(familykit.DirVAE, "config.json"), err)
	}
	if s.VAE.SpatialRatio() != packing.VAESpatialRatio || s.VAE.LatentChannels != s.DiT.InChannels {
		return fmt.Errorf("fastvideo: %s: spatial ratio %d and %d latent channels do not match the H3 geometry (ratio %d, %d DiT input channels)",
			filepath.Join(dir, familykit.DirVAE, "config.json"), s.VAE.SpatialRatio(), s.VAE.LatentChannels, packing.VAESpatialRatio, s.DiT.InChannels)
	}
	if s.AudioVAE, err = h3audio.ReadConfig(filepath.Join(dir, dirAudioVAE)); err != nil {
		return familykit.MissingOr(dir, snapshotName, filepath.Join(dirAudioVAE, "config.json"), err)
	}
	if s.AudioVAE.LatentChannels != s.DiT.AudioInChannels {
		return fmt.Errorf("fastvideo: %s: %d latent channels, but the DiT takes %d audio channels",
			filepath.Join(dir, dirAudioVAE, "config.json"), s.AudioVAE.LatentChannels, s.DiT.AudioInChannels)
	}
	s.AudioSampleRate = s.AudioVAE.SamplingRate
	return nil
}

// readSchedulers reads both ladders' shifts (12 and 3 released; the audio one defaults to 3 when
// audio_scheduler/ is absent).
func (s *Spec) readSchedulers(dir string) error {
	var err error
	if s.VideoShift, err = readShift(dir, filepath.Join("scheduler", "scheduler_config.json"), true); err != nil {
		return err
	}
	audioPath := filepath.Join("audio_scheduler", "scheduler_config.json")
	if shift, err := readShift(dir, audioPath, false); err != nil {
		return err
	} else if shift > 0 {
		s.AudioShift = shift
	} else {
		s.Notes = append(s.Notes, fmt.Sprintf("%s missing: audio shift %g (released)", filepath.Join(dir, audioPath), s.AudioShift))
	}
	return nil
}

// readJSON reads a small JSON file of the snapshot; a missing required file is invalid input.
func readJSON(dir, rel string, v any, required bool) error {
	err := familykit.ReadConfigJSON(filepath.Join(dir, rel), v)
	if required && err != nil {
		return familykit.MissingOr(dir, snapshotName, rel, err)
	}
	return err
}

// readShift reads a MiniMaxH3Scheduler config; 0 when optional and absent.
func readShift(dir, rel string, required bool) (float64, error) {
	var c struct {
		ClassName string   `json:"_class_name"`
		Shift     *float64 `json:"shift"`
	}
	if err := readJSON(dir, rel, &c, required); err != nil {
		if !required && errors.Is(err, os.ErrNotExist) {
			return 0, nil
		}
		return 0, err
	}
	path := filepath.Join(dir, rel)
	if c.ClassName != "" && c.ClassName != "MiniMaxH3Scheduler" {
		return 0, fmt.Errorf("fastvideo: %s: scheduler %q, want MiniMaxH3Scheduler (is this a MiniMax H3 folder?)", path, c.ClassName)
	}
	if c.Shift == nil || !(*c.Shift > 0) {
		return 0, fmt.Errorf("fastvideo: %s: shift must be a positive number", path)
	}
	return *c.Shift, nil
}

// inferenceContract is a FastH3 student's fastvideo_inference.json (FastVideo's
// fasth3-inference-contract-v1: the trained DMD rungs and both scheduler shifts).
type inferenceContract struct {
	SchemaVersion       string   `json:"schema_version"`
	VideoShift          *float64 `json:"video_scheduler_shift"`
	AudioShift          *float64 `json:"audio_scheduler_shift"`
	DMDDenoisingSteps   []int    `json:"dmd_denoising_steps"`
	TransformerForwards int      `json:"transformer_forwards"`
	NumInferenceSteps   int      `json:"num_inference_steps"`
	// VSA defaults, in FastVideo's request-knob names (an assumption: no released contract sets them yet).
	VSASparsity *float64 `json:"vsa_sparsity"`
	VSATileSize int      `json:"vsa_tile_size"`
}

// maxContractRungs bounds the rungs a contract may declare (a distilled student trains a few).
const maxContractRungs = family.MaxSteps

// readContract applies a shift-declaring fastvideo_inference.json (at the folder root or in
// transformer/); four-step sidecars without shifts keep the uniform ladder.
func (s *Spec) readContract(dir string) error {
	for _, rel := range []string{contractFile, filepath.Join(familykit.DirTransformer, contractFile)} {
		var c inferenceContract
		if err := readJSON(dir, rel, &c, false); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			return err
		}
		if err := s.applyContractVSA(&c, filepath.Join(dir, rel)); err != nil {
			return err
		}
		if c.VideoShift == nil && c.AudioShift == nil {
			return nil
		}
		if err := c.check(filepath.Join(dir, rel)); err != nil {
			return err
		}
		s.VideoShift, s.AudioShift, s.DMDRungs = *c.VideoShift, *c.AudioShift, c.DMDDenoisingSteps
		return nil
	}
	return nil
}

func (c *inferenceContract) check(path string) error {
	switch {
	case c.SchemaVersion != "fasth3-inference-contract-v1":
		return fmt.Errorf("fastvideo: %s: unsupported schema_version %q (want fasth3-inference-contract-v1)", path, c.SchemaVersion)
	case c.VideoShift == nil || c.AudioShift == nil:
		return fmt.Errorf("fastvideo: %s must declare both video_scheduler_shift and audio_scheduler_shift", path)
	case len(c.DMDDenoisingSteps) > maxContractRungs:
		return fmt.Errorf("fastvideo: %s declares %d DMD rungs, at most %d are allowed", path, len(c.DMDDenoisingSteps), maxContractRungs)
	case c.TransformerForwards != len(c.DMDDenoisingSteps) || c.NumInferenceSteps != len(c.DMDDenoisingSteps)+1:
		return fmt.Errorf("fastvideo: %s: transformer_forwards must equal the %d DMD rungs and num_inference_steps the rungs plus one",
			path, len(c.DMDDenoisingSteps))
	}
	for _, shift := range []float64{*c.VideoShift, *c.AudioShift} {
		if _, err := schedule.NewH3LadderFromDMDSteps(shift, c.DMDDenoisingSteps); err != nil {
			return fmt.Errorf("fastvideo: %s: %w", path, err)
		}
	}
	return nil
}

// applyContractVSA takes the contract's VSA defaults, when it declares them.
func (s *Spec) applyContractVSA(c *inferenceContract, path string) error {
	if c.VSASparsity != nil {
		if !(*c.VSASparsity >= 0 && *c.VSASparsity < 1) { // written so NaN fails too
			return fmt.Errorf("fastvideo: %s: vsa_sparsity %g is outside [0, 1)", path, *c.VSASparsity)
		}
		s.VSA.Sparsity = *c.VSASparsity
	}
	if c.VSATileSize != 0 {
		if c.VSATileSize != 64 && c.VSATileSize != 256 {
			return fmt.Errorf("fastvideo: %s: vsa_tile_size %d is not 64 or 256", path, c.VSATileSize)
		}
		s.VSA.TileSize = c.VSATileSize
	}
	return nil
}

// dirProcessor holds the Qwen3-VL image processor's preprocessor_config.json.
const dirProcessor = "processor"

// readKeyframeConfigs reads the vision tower's and the image processor's configs when the
// snapshot has processor/: without it the model takes no keyframes (T2VA only).
func (s *Spec) readKeyframeConfigs(dir string) error {
	s.setKeyframes(nil, nil)
	if _, err := os.Stat(filepath.Join(dir, dirProcessor, "preprocessor_config.json")); err != nil {
		return nil
	}
	vc, err := qwen3vl.LoadVisionConfig(filepath.Join(dir, familykit.DirTextEncoder))
	if err != nil {
		return fmt.Errorf("fastvideo: %w (FL2VA keyframes need the vision tower of %s)", err, filepath.Join(dir, familykit.DirTextEncoder))
	}
	pc, err := qwen3vl.LoadProcessorConfig(filepath.Join(dir, dirProcessor))
	if err != nil {
		return fmt.Errorf("fastvideo: %w", err)
	}
	if vc.OutHiddenSize != s.DiT.TextDim {
		return fmt.Errorf("fastvideo: %s: the vision tower's out_hidden_size %d differs from the transformer's text_dim %d",
			filepath.Join(dir, familykit.DirTextEncoder, "config.json"), vc.OutHiddenSize, s.DiT.TextDim)
	}
	s.setKeyframes(&vc, &pc)
	return nil
}

// storedBytes sums the tensor bytes of the checkpoint in dir, from its headers; 0 for a folder
// without weights (plans read configs alone; New checks the weights).
func storedBytes(dir string) int64 {
	ck, err := safetensors.OpenCheckpoint(dir)
	if err != nil {
		return 0
	}
	defer ck.Close()
	var n int64
	for _, name := range ck.Names() {
		if info, ok := ck.Tensor(name); ok {
			n += int64(len(info.Data))
		}
	}
	return n
}
