package family

import (
	"fmt"
	"image"

	"fastvideo/fastvideo/api"
	"fastvideo/internal/imagefile"
	"fastvideo/internal/imageops"
)

// keyframeSlot is one of a request's two keyframes.
type keyframeSlot struct {
	name                  string // "first-frame", "last-frame"
	valueField, pathField string
	value                 image.Image
	path                  string
	supported             bool
}

// ImageModelsHint names the models that take a first-frame image, for messages.
const ImageModelsHint = "the Wan2.2 TI2V models (wan2.2-ti2v-5b, fastwan2.2-ti2v-5b, tiny-wan2.2) take a first-frame image"

// resolveKeyframes reads the request's keyframes, before anything loads: a value and a path for
// the same keyframe, a keyframe the model does not take, and an unreadable, damaged, oversized or
// unsupported image are RequestErrors.
func resolveKeyframes(info ModelInfo, req api.Request, r *Resolved) error {
	slots := []keyframeSlot{
		{"first-frame", "image", "image_path", req.Image, req.ImagePath, info.FirstImage},
		{"last-frame", "last_image", "last_image_path", req.LastImage, req.LastImagePath, info.LastImage},
	}
	for i, s := range slots {
		k, err := s.read(info)
		if err != nil {
			return err
		}
		if i == 0 {
			r.FirstImage = k
		} else {
			r.LastImage = k
		}
	}
	return nil
}

func (s keyframeSlot) read(info ModelInfo) (*api.Keyframe, error) {
	if s.value == nil && s.path == "" {
		return nil, nil
	}
	if s.value != nil && s.path != "" {
		return nil, &api.RequestError{Field: s.pathField, Value: s.path,
			Allowed: fmt.Sprintf("empty when %s is set (one image per keyframe)", s.valueField)}
	}
	field, shown := s.valueField, any(fmt.Sprintf("%T", s.value))
	if s.path != "" {
		field, shown = s.pathField, s.path
	}
	if !s.supported {
		hint := ImageModelsHint
		if s.name == "last-frame" {
			hint = "a model whose ModelInfo.LastImage is true"
		}
		return nil, &api.RequestError{Field: field, Value: shown,
			Allowed: fmt.Sprintf("unset: %s takes no %s image (%s)", info.Name, s.name, hint)}
	}
	var px imageops.Image
	var err error
	if s.path != "" {
		px, err = imagefile.Open(s.path)
	} else {
		px, err = imagefile.ToRGB(s.value)
	}
	if err != nil {
		return nil, &api.RequestError{Field: field, Value: shown, Allowed: fmt.Sprintf(
			"a readable PNG or JPEG image (RGB, grayscale or palette; at most %d pixels a side, %d in all, %d MiB): this one is %v",
			imagefile.MaxSide, imagefile.MaxPixels, imagefile.MaxFileBytes>>20, err)}
	}
	return &api.Keyframe{Field: field, Source: s.path, Pixels: px}, nil
}
