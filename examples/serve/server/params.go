package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"mime"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"fastvideo/fastvideo"
	"fastvideo/internal/strictjson"
)

// badRequest is invalid input: the HTTP status (400 unless said otherwise) and the field.
type badRequest struct {
	status int
	param  string
	msg    string
}

func (e *badRequest) Error() string { return e.msg }

func invalid(param, format string, a ...any) *badRequest {
	return &badRequest{status: http.StatusBadRequest, param: param, msg: fmt.Sprintf(format, a...)}
}

// createParams is the body of POST /v1/videos. Numbers and booleans may also come as strings, so
// that a multipart or URL-encoded form (curl -F, as in OpenAI's examples) says the same as JSON.
type createParams struct {
	model, prompt, negativePrompt, size, preset string
	decoder                                     string
	seconds, guidanceScale                      float64
	numFrames, fps, steps                       int
	fastFactor, fastSpatialScale                int
	seed                                        *int64
	fast, fastSpatial, enhancePrompt, preview   bool
	loras                                       []LoRA
	// Two-stage refine (Wan DMD models): the SDK's Refine* fields.
	refine         bool
	refineScale    int
	refineSteps    []int
	refineSigma    *float64
	refineAddNoise *bool
	refineUpsample string
	// sent are the fields the client gave, so that an error names what it sent.
	sent map[string]bool
}

// clientParam names a field of the SDK's request as the client sent it: a frame count the client
// gave as seconds is its "seconds", a size its "size", the steps its "steps".
func (p *createParams) clientParam(field string) string {
	for _, alias := range map[string][]string{"num_frames": {"seconds"}, "height": {"size"}, "width": {"size"},
		"num_inference_steps": {"steps"}}[field] {
		if p.sent[alias] && !p.sent[field] {
			return alias
		}
	}
	return field
}

// paramFields are the accepted fields and where each goes; "steps" is the short name of
// num_inference_steps. A field not listed is rejected by name: a typo must not silently fall back
// to a preset's value, and no field may name a file.
var paramFields = map[string]func(p *createParams, raw json.RawMessage) error{
	"model":               textField(func(p *createParams) *string { return &p.model }),
	"prompt":              textField(func(p *createParams) *string { return &p.prompt }),
	"negative_prompt":     textField(func(p *createParams) *string { return &p.negativePrompt }),
	"size":                textField(func(p *createParams) *string { return &p.size }),
	"preset":              textField(func(p *createParams) *string { return &p.preset }),
	"decoder":             textField(func(p *createParams) *string { return &p.decoder }),
	"preview":             numberField(func(p *createParams) *bool { return &p.preview }),
	"seconds":             numberField(func(p *createParams) *float64 { return &p.seconds }),
	"guidance_scale":      numberField(func(p *createParams) *float64 { return &p.guidanceScale }),
	"num_frames":          numberField(func(p *createParams) *int { return &p.numFrames }),
	"fps":                 numberField(func(p *createParams) *int { return &p.fps }),
	"num_inference_steps": numberField(func(p *createParams) *int { return &p.steps }),
	"steps":               numberField(func(p *createParams) *int { return &p.steps }),
	"fast_factor":         numberField(func(p *createParams) *int { return &p.fastFactor }),
	"fast_spatial_scale":  numberField(func(p *createParams) *int { return &p.fastSpatialScale }),
	"fast":                numberField(func(p *createParams) *bool { return &p.fast }),
	"fast_spatial":        numberField(func(p *createParams) *bool { return &p.fastSpatial }),
	"enhance_prompt":      numberField(func(p *createParams) *bool { return &p.enhancePrompt }),
	"loras": func(p *createParams, raw json.RawMessage) (err error) {
		p.loras, err = parseLoRAs(raw)
		return err
	},
	"refine":          numberField(func(p *createParams) *bool { return &p.refine }),
	"refine_scale":    numberField(func(p *createParams) *int { return &p.refineScale }),
	"refine_upsample": textField(func(p *createParams) *string { return &p.refineUpsample }),
	"refine_sigma": func(p *createParams, raw json.RawMessage) error {
		p.refineSigma = new(float64)
		return decodeLoose(raw, p.refineSigma)
	},
	"refine_add_noise": func(p *createParams, raw json.RawMessage) error {
		p.refineAddNoise = new(bool)
		return decodeLoose(raw, p.refineAddNoise)
	},
	"refine_steps": refineStepsField,
	"seed": func(p *createParams, raw json.RawMessage) error {
		p.seed = new(int64)
		return decodeLoose(raw, p.seed)
	},
}

// refineStepsField reads the stage-2 timesteps: a JSON array of integers, or (from a form) a
// comma list such as "757,522".
func refineStepsField(p *createParams, raw json.RawMessage) error {
	p.refineSteps = []int{}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return json.Unmarshal(raw, &p.refineSteps)
	}
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return err
		}
		p.refineSteps = append(p.refineSteps, n)
	}
	return nil
}

func textField(at func(*createParams) *string) func(*createParams, json.RawMessage) error {
	return func(p *createParams, raw json.RawMessage) error { return json.Unmarshal(raw, at(p)) }
}

func numberField[T int | float64 | bool](at func(*createParams) *T) func(*createParams, json.RawMessage) error {
	return func(p *createParams, raw json.RawMessage) error { return decodeLoose(raw, at(p)) }
}

// decodeLoose decodes a JSON number or boolean, or a string holding one.
func decodeLoose(raw json.RawMessage, dst any) error {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		raw = json.RawMessage(strings.TrimSpace(s))
	}
	return json.Unmarshal(raw, dst)
}

// parseCreate reads the body of POST /v1/videos: JSON, or a form.
func parseCreate(r *http.Request) (*createParams, error) {
	fields, err := readFields(r)
	if err != nil {
		return nil, err
	}
	if _, ok := fields["input_reference"]; ok {
		return nil, invalid("input_reference", "image conditioning is not supported: this server generates from text only")
	}
	names := slices.Sorted(maps.Keys(fields)) // the first bad field reported is the same every time
	p := &createParams{sent: map[string]bool{}}
	for _, name := range names {
		p.sent[name] = true
	}
	for _, name := range names {
		set, ok := paramFields[name]
		if !ok {
			return nil, invalid(name, "unknown field %q", name)
		}
		if string(fields[name]) == "null" {
			continue // JSON null is "not given": the preset's value
		}
		if err := set(p, fields[name]); err != nil {
			return nil, invalid(name, "invalid %s: %s", name, bytes.TrimSpace(fields[name]))
		}
	}
	if _, both := fields["steps"]; both {
		if _, also := fields["num_inference_steps"]; also {
			return nil, invalid("steps", "give steps or num_inference_steps, not both")
		}
	}
	return p, nil
}

// readFields returns the body's fields as JSON values; form values become JSON strings. A body
// that opens with "{" is JSON whatever its Content-Type says (curl -d sends JSON as a form).
func readFields(r *http.Request) (map[string]json.RawMessage, error) {
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var form url.Values
	switch ct {
	case "multipart/form-data":
		if err := r.ParseMultipartForm(1 << 20); err != nil {
			return nil, bodyError(err)
		}
		for name := range r.MultipartForm.File {
			return nil, invalid(name, "file uploads are not supported")
		}
		form = r.MultipartForm.Value
	case "application/json", "application/x-www-form-urlencoded", "":
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, bodyError(err)
		}
		if trimmed := bytes.TrimSpace(body); len(trimmed) > 0 && trimmed[0] == '{' || ct == "application/json" {
			return decodeJSONObject(body)
		}
		if form, err = url.ParseQuery(string(body)); err != nil {
			return nil, bodyError(err)
		}
	default:
		return nil, &badRequest{status: http.StatusUnsupportedMediaType, msg: fmt.Sprintf(
			"unsupported Content-Type %q: send application/json or a form", ct)}
	}
	fields := map[string]json.RawMessage{}
	for name, values := range form {
		if len(values) != 1 {
			return nil, invalid(name, "field %q given %d times", name, len(values))
		}
		raw, _ := json.Marshal(values[0])
		fields[name] = raw
	}
	return fields, nil
}

func decodeJSONObject(body []byte) (map[string]json.RawMessage, error) {
	fields := map[string]json.RawMessage{}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&fields); err != nil {
		return nil, bodyError(err)
	}
	if dec.More() {
		return nil, invalid("", "the body holds more than one JSON value")
	}
	// encoding/json keeps the last of a repeated key: a client (or a proxy) could mean the first.
	if err := strictjson.CheckUniqueKeys(body); err != nil {
		return nil, invalid("", "%v: send each field once", err)
	}
	return fields, nil
}

// bodyError is a body that could not be read: too large (413) or malformed (400).
func bodyError(err error) error {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return &badRequest{status: http.StatusRequestEntityTooLarge,
			msg: fmt.Sprintf("the request body is larger than %d bytes", tooLarge.Limit)}
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return &badRequest{status: http.StatusRequestTimeout, msg: "the request body did not arrive in time: send it at once"}
	}
	return invalid("", "the body is not a JSON object or a form: %v", err)
}

// limits bound what one request may ask.
type limits struct {
	maxPromptBytes int
}

// request builds the SDK request of p for the served model. The output path is the server's: no
// field of a request names a file.
func (p *createParams) request(info fastvideo.ModelInfo, lim limits) (fastvideo.Request, error) {
	req := fastvideo.Request{
		Prompt: p.prompt, NegativePrompt: p.negativePrompt, NumFrames: p.numFrames, FPS: p.fps,
		NumInferenceSteps: p.steps, GuidanceScale: p.guidanceScale, Seed: p.seed, Preset: p.preset,
		Fast: p.fast, FastFactor: p.fastFactor, FastSpatial: p.fastSpatial, FastSpatialScale: p.fastSpatialScale,
		EnhancePrompt: p.enhancePrompt,
		Refine:        p.refine, RefineScale: p.refineScale, RefineSteps: p.refineSteps, RefineSigma: p.refineSigma,
		RefineAddNoise: p.refineAddNoise, RefineUpsample: p.refineUpsample,
		Decoder: p.decoder, Preview: p.preview,
	}
	if p.model != "" && p.model != info.Name {
		return req, invalid("model", "model %q is not served here; this server serves %q", p.model, info.Name)
	}
	if strings.TrimSpace(p.prompt) == "" {
		return req, invalid("prompt", "prompt is required")
	}
	if len(p.prompt) > lim.maxPromptBytes || len(p.negativePrompt) > lim.maxPromptBytes {
		field := map[bool]string{true: "prompt", false: "negative_prompt"}[len(p.prompt) > lim.maxPromptBytes]
		return req, invalid(field, "%s is longer than %d bytes", field, lim.maxPromptBytes)
	}
	if !utf8.ValidString(p.prompt) || !utf8.ValidString(p.negativePrompt) {
		return req, invalid("prompt", "the prompts must be UTF-8 text")
	}
	if p.size != "" {
		w, h, ok := parseSize(p.size)
		if !ok {
			return req, invalid("size", "size %q is not WIDTHxHEIGHT in pixels, e.g. \"832x480\"", p.size)
		}
		req.Width, req.Height = w, h
	}
	if p.seconds != 0 {
		if p.numFrames != 0 {
			return req, invalid("seconds", "give seconds or num_frames, not both")
		}
		frames, err := framesFor(p.seconds, req, info)
		if err != nil {
			return req, err
		}
		req.NumFrames = frames
	}
	return req, nil
}

// framesFor converts a duration to a frame count at the request's frame rate (else its preset's).
func framesFor(seconds float64, req fastvideo.Request, info fastvideo.ModelInfo) (int, error) {
	if seconds < 0 || seconds > 3600 || math.IsNaN(seconds) {
		return 0, invalid("seconds", "seconds must be positive, at most 3600")
	}
	fps := req.FPS
	if fps == 0 {
		name := req.Preset
		if name == "" {
			name = info.DefaultPreset
		}
		for _, pr := range info.Presets {
			if pr.Name == name {
				fps = pr.FPS
			}
		}
	}
	if fps <= 0 {
		return 0, invalid("preset", "unknown preset %q", req.Preset)
	}
	return max(1, int(math.Round(seconds*float64(fps)))), nil
}

// parseSize reads "WxH".
func parseSize(s string) (w, h int, ok bool) {
	ws, hs, found := strings.Cut(strings.ToLower(strings.TrimSpace(s)), "x")
	if !found {
		return 0, 0, false
	}
	w, err1 := strconv.Atoi(ws)
	h, err2 := strconv.Atoi(hs)
	return w, h, err1 == nil && err2 == nil && w > 0 && h > 0
}
