// Package clitest holds the test helpers of the example binaries' tests (t2va, t2v): running a
// binary's run function in memory, its exit-code table and its -json generation output.
package clitest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"fastvideo/fastvideo"
	"fastvideo/internal/media"
	"fastvideo/internal/safetensors"
	"fastvideo/internal/testutil"
	"fastvideo/vae/taehv"
)

// RunFunc is a binary's testable entry point: it parses args and returns the exit code.
type RunFunc func(ctx context.Context, args []string, stdout, stderr io.Writer) int

// Run runs run on args and returns the exit code and what it wrote.
func Run(run RunFunc, args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// RunJSON runs run on args, which must succeed, and decodes its stdout into v.
func RunJSON(t *testing.T, run RunFunc, v any, args ...string) {
	t.Helper()
	decodeOutput(t, run, args, v)
}

// RunPlan runs run with -plan -json and args, and decodes the plan's one flat JSON object twice:
// into the common plan and into the family's details (e.g. *h3.PlanDetails, *wan.PlanDetails).
func RunPlan(t *testing.T, run RunFunc, details any, args ...string) *fastvideo.GenerationPlan {
	t.Helper()
	var p fastvideo.GenerationPlan
	decodeOutput(t, run, append([]string{"-plan", "-json"}, args...), &p, details)
	return &p
}

// decodeOutput runs run on args, which must succeed, and decodes its stdout into each of vs.
func decodeOutput(t *testing.T, run RunFunc, args []string, vs ...any) {
	t.Helper()
	code, out, errs := Run(run, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, v := range vs {
		if err := json.Unmarshal([]byte(out), v); err != nil {
			t.Fatalf("%v in:\n%s", err, out)
		}
	}
}

// ExitCase is a command line (split on spaces), its exit code and a text its stderr must hold. It
// is an unnamed struct type so that tables list cases without field names.
type ExitCase = struct {
	Args string
	Code int
	Msg  string
}

// SharedExitCases are the invalid command lines both generation binaries (t2v, t2va) reject the same
// way: the flags and arguments they parse in common.
var SharedExitCases = []ExitCase{
	{"-plan -model wan", 2, `invalid -model "wan"`},
	{"-plan -negative-prompt blurry", 2, "invalid -negative-prompt"},
	{"-plan -dtype f8", 2, "invalid -dtype"},
	{"-no-such-flag", 2, "not defined"},
	{"-plan extra", 2, "unexpected argument"},
	{"-plan -frames 9223372036854775807", 2, "invalid -frames 9223372036854775807"},
	{"-plan -height 9223372036854775776 -width 32", 2, "invalid -height 9223372036854775776"},
	{"-plan -compile-cache /dev/null", 2, `invalid -compile-cache "/dev/null": allowed a folder this process can write`},
	{"-plan -compile-cache /dev/null/sub", 2, "is a file, not a folder"},
}

// CheckExitCodes runs each case, then each of SharedExitCases, and reports those whose exit code or
// message differ.
func CheckExitCodes(t *testing.T, run RunFunc, cases []ExitCase) {
	t.Helper()
	CheckExitCases(t, run, slices.Concat(cases, SharedExitCases))
}

// CheckExitCases is CheckExitCodes without SharedExitCases, for a table of one feature's refusals
// that the binary's main table has already run them beside.
func CheckExitCases(t *testing.T, run RunFunc, cases []ExitCase) {
	t.Helper()
	for _, c := range cases {
		code, _, errs := Run(run, strings.Fields(c.Args)...)
		if code != c.Code || !strings.Contains(errs, c.Msg) {
			t.Errorf("%q: exit %d, stderr %q; want exit %d mentioning %q", c.Args, code, errs, c.Code, c.Msg)
		}
	}
}

// Generated is the part of a -json generation result the tests check.
type Generated struct {
	OutputPath string `json:"output_path"`
	NumFrames  int    `json:"num_frames"`
	Timings    struct {
		Total float64 `json:"total"`
	} `json:"timings"`
}

// Generate runs "-prompt a red fox -out out -json" and checks that the result names out, has
// frames frames and took time.
func Generate(t *testing.T, run RunFunc, out string, frames int) Generated {
	t.Helper()
	var res Generated
	RunJSON(t, run, &res, "-prompt", "a red fox", "-out", out, "-json")
	if res.OutputPath != out || res.NumFrames != frames || res.Timings.Total <= 0 {
		t.Fatalf("result %+v", res)
	}
	return res
}

// Probe reads the streams of a written media file with ffprobe (found as media.FindTools finds it).
func Probe(t *testing.T, path string) *media.ProbeInfo {
	t.Helper()
	tools, err := media.FindTools(os.Getenv(media.EnvFFmpeg), os.Getenv(media.EnvFFprobe))
	if err != nil {
		t.Fatal(err)
	}
	info, err := tools.Probe(path)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// CheckNoOverwrite runs "-prompt a red fox -out out" with extra arguments once more: it must
// succeed and report a new file, renamed (e.g. clip_1.mp4), rather than overwrite out.
func CheckNoOverwrite(t *testing.T, run RunFunc, out, renamed string, extra ...string) {
	t.Helper()
	code, stdout, errs := Run(run, append([]string{"-prompt", "a red fox", "-out", out}, extra...)...)
	if code != 0 || !strings.Contains(errs, renamed) {
		t.Fatalf("second run: exit %d\n%s%s", code, stdout, errs)
	}
}

// FastCase is a fast-mode command line (split on spaces) and the canvas (HxW, e.g. "64x96") and
// frame filters its plan must show.
type FastCase = struct {
	Args, Canvas string
	Filters      []string
}

// CheckFastModes plans and runs each case: the plan must reduce the canvas as the case says and
// list its filters, and the MP4 must have the plan's frame count, size and duration (ffprobe), so
// the denoise ran on the reduced geometry and the filters brought the frames back to the request.
func CheckFastModes(t *testing.T, run RunFunc, details any, cases []FastCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.Args, func(t *testing.T) {
			args := strings.Fields(c.Args)
			plan := RunPlan(t, run, details, args...)
			if canvas := fmt.Sprintf("%dx%d", plan.CanvasHeight, plan.CanvasWidth); canvas != c.Canvas || !slices.Equal(plan.FrameFilters, c.Filters) {
				t.Fatalf("plan canvas %s, filters %q; want %s, %q", canvas, plan.FrameFilters, c.Canvas, c.Filters)
			}
			out := filepath.Join(t.TempDir(), "clip.mp4")
			var res Generated
			RunJSON(t, run, &res, append([]string{"-prompt", "a red fox", "-out", out, "-json"}, args...)...)
			v := Probe(t, out).Video
			if v == nil || v.Width != plan.Width || v.Height != plan.Height || v.Frames != plan.NumFrames || res.NumFrames != plan.NumFrames ||
				math.Abs(v.Duration-plan.DurationSeconds) > 0.5/float64(plan.FPS) {
				t.Fatalf("probe %+v; plan %dx%d (HxW), %d frames, %.3f s", v, plan.Height, plan.Width, plan.NumFrames, plan.DurationSeconds)
			}
			t.Logf("%d frames of %dx%d in %.2f s", v.Frames, v.Height, v.Width, res.Timings.Total)
		})
	}
}

// CheckReadmeFlags checks that the README's flag table of binary (its "Every flag" section, a
// <details> block whose summary names the binary) lists every flag the binary's -h output shows,
// and no flag the binary does not have.
func CheckReadmeFlags(t *testing.T, binary, help string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(data)
	start := strings.Index(readme, "<summary><code>"+binary+"</code>")
	if start < 0 {
		t.Fatalf("the README has no flag table for %s", binary)
	}
	table := readme[start:]
	table = table[:strings.Index(table, "</details>")]
	var want []string
	for _, line := range strings.Split(help, "\n") {
		if name, ok := strings.CutPrefix(line, "  -"); ok && name != "" {
			want = append(want, "-"+strings.Fields(name)[0])
		}
	}
	if len(want) == 0 {
		t.Fatalf("%s -h lists no flags:\n%s", binary, help)
	}
	for _, f := range want {
		if !strings.Contains(table, "| `"+f+"` |") {
			t.Errorf("the README's %s table lacks %s: regenerate it from %s -h", binary, f, binary)
		}
	}
	if rows := strings.Count(table, "\n| `-"); rows != len(want) {
		t.Errorf("the README's %s table has %d flags, %s -h %d", binary, rows, binary, len(want))
	}
}

// CheckTinyDecoder runs the tiny decoder's flags on the binary's default model: -plan names the
// TAEHV variant, "-decoder tiny -preview DIR" (with extra arguments) writes an MP4 of frames frames
// and one JPEG per denoising step plus latest.jpg (no temporary file left), and a missing or
// mismatched -tiny-decoder file (mismatched: a taew2_2-shaped file, 48 channels, for a model of
// other latents) or an unknown -decoder exits 2 naming the flag.
func CheckTinyDecoder(t *testing.T, run RunFunc, variant string, frames int, extra ...string) {
	t.Helper()
	mismatched := filepath.Join(t.TempDir(), "taew2_2.safetensors")
	var ts []safetensors.Tensor
	for n, info := range taehv.FormulaSource(taehv.Taew22()) {
		ts = append(ts, safetensors.Tensor{Name: n, DType: info.DType, Shape: info.Shape, Data: info.Data})
	}
	if err := safetensors.WriteFile(mismatched, ts, nil); err != nil {
		t.Fatal(err)
	}
	p := RunPlan(t, run, &map[string]any{}, append([]string{"-decoder", "tiny"}, extra...)...)
	if p.Decoder != "tiny" || p.TinyDecoder != variant {
		t.Errorf("plan decoder %q (%q), want tiny (%s)", p.Decoder, p.TinyDecoder, variant)
	}
	dir := t.TempDir()
	out, previews := filepath.Join(dir, "clip.mp4"), filepath.Join(dir, "previews")
	var res Generated
	RunJSON(t, run, &res, slices.Concat([]string{"-prompt", "a red fox", "-out", out, "-json", "-decoder", "tiny", "-preview", previews}, extra)...)
	if info := Probe(t, out); info.Video == nil || info.Video.Frames != frames || res.NumFrames != frames {
		t.Errorf("-decoder tiny: %d frames in the file (%+v), want %d", res.NumFrames, info.Video, frames)
	}
	names := testutil.DirNames(t, previews)
	for _, name := range names {
		data, err := os.ReadFile(filepath.Join(previews, name))
		if err != nil || !bytes.HasPrefix(data, []byte{0xff, 0xd8}) {
			t.Errorf("preview %s is no JPEG (%v)", name, err)
		}
	}
	if len(names) != p.Steps+1 || !slices.Contains(names, "latest.jpg") || !slices.Contains(names, "step_001.jpg") {
		t.Errorf("preview folder %v, want step_001.jpg .. step_%03d.jpg and latest.jpg", names, p.Steps)
	}
	CheckExitCodes(t, run, []ExitCase{
		{"-plan -decoder fast", 2, "invalid -decoder"},
		{"-prompt hi -decoder tiny -tiny-decoder " + filepath.Join(dir, "none.safetensors"), 2, "invalid -tiny-decoder"},
		{"-prompt hi -decoder tiny -tiny-decoder " + mismatched, 2, "invalid -tiny-decoder"},
	})
}
