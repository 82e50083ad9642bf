package family

import (
	"fmt"
	"image"

	"fastvideo/internal/imagefile"
	"fastvideo/internal/imageops"
)

// Keyframe is a request's condition image, read and converted to 8-bit RGB (EXIF orientation
// applied, alpha dropped) as FastVideo's load_image does (fastvideo/models/vision_utils.py); the
// family resizes and crops it by its model's rule.
type Keyframe struct {
	// Field is the request field it came from ("image", "image_path", "last_image",
	// "last_image_path"), for messages.
	Field string
	// Source is the file, or "" for an image.Image passed in the request.
	Source string
	Pixels imageops.Image
}

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
func resolveKeyframes(info ModelInfo, req Request, r *Resolved) error {
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

func (s keyframeSlot) read(info ModelInfo) (*Keyframe, error) {
	if s.value == nil && s.path == "" {
		return nil, nil
	}
	if s.value != nil && s.path != "" {
		return nil, &RequestError{Field: s.pathField, Value: s.path,
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
		return nil, &RequestError{Field: field, Value: shown,
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
		return nil, &RequestError{Field: field, Value: shown, Allowed: fmt.Sprintf(
			"a readable PNG or JPEG image (RGB, grayscale or palette; at most %d pixels a side, %d in all, %d MiB): this one is %v",
			imagefile.MaxSide, imagefile.MaxPixels, imagefile.MaxFileBytes>>20, err)}
	}
	return &Keyframe{Field: field, Source: s.path, Pixels: px}, nil
}
