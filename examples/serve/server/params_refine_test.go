package server

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"fastvideo/fastvideo"
)

// TestRefineFields: refine, refine_scale, refine_steps (a JSON array, or a comma list from a form),
// refine_sigma, refine_add_noise and refine_upsample reach the SDK request; the served H3 model
// refuses refine with a 400 naming the field.
func TestRefineFields(t *testing.T) {
	for _, c := range []struct{ ct, body string }{
		{"application/json", `{"prompt": "x", "refine": true, "refine_scale": 3, "refine_steps": [757, 522], "refine_sigma": 0.5, "refine_add_noise": false, "refine_upsample": "nearest"}`},
		{"application/x-www-form-urlencoded", "prompt=x&refine=true&refine_scale=3&refine_steps=757,522&refine_sigma=0.5&refine_add_noise=false&refine_upsample=nearest"},
	} {
		r := httptest.NewRequest("POST", "/v1/videos", strings.NewReader(c.body))
		r.Header.Set("Content-Type", c.ct)
		p, err := parseCreate(r)
		if err != nil {
			t.Fatalf("%s: %v", c.ct, err)
		}
		req, err := p.request(fastvideo.ModelInfo{Name: "tiny-wan"}, limits{maxPromptBytes: 1 << 10})
		if err != nil {
			t.Fatalf("%s: %v", c.ct, err)
		}
		if !req.Refine || req.RefineScale != 3 || fmt.Sprint(req.RefineSteps) != "[757 522]" || req.RefineSigma == nil || *req.RefineSigma != 0.5 ||
			req.RefineAddNoise == nil || *req.RefineAddNoise || req.RefineUpsample != "nearest" {
			t.Errorf("%s: request %+v", c.ct, req)
		}
	}
	r := httptest.NewRequest("POST", "/v1/videos", strings.NewReader(`{"prompt": "x", "refine_steps": "757,x"}`))
	r.Header.Set("Content-Type", "application/json")
	if _, err := parseCreate(r); err == nil || !strings.Contains(err.Error(), "invalid refine_steps") {
		t.Errorf("a bad grid: %v", err)
	}
	h := start(t, t.TempDir(), nil)
	var out struct{ Error APIError }
	if resp := h.do("POST", "/v1/videos", "application/json", `{"prompt": "a red fox", "refine": true}`, &out); resp.StatusCode != 400 || out.Error.Param != "refine" {
		t.Errorf("refine on H3: %d %+v", resp.StatusCode, out.Error)
	}
}
