package fastvideo

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode"

	"fastvideo/internal/testutil"
)

func TestOutputNames(t *testing.T) {
	for in, want := range map[string]string{
		"a red fox":                  "a_red_fox",
		"  What? A <cat>: \"meow\" ": "what_a_meow", // "<cat>" reads as markup
		"tabs\tand\n\nnewlines":      "tabs_and_newlines",
		"...dots...":                 "dots",
		"/\\:*?\"<>|":                "output",
		"(S1) A fox says <d>[English] Hello.</d>": "a_fox_says_hello",
		strings.Repeat("é", 120):                  strings.Repeat("é", 40), // 80 bytes
	} {
		if got := fileNameFromPrompt(in); got != want {
			t.Errorf("fileNameFromPrompt(%q) = %q, want %q", in, got, want)
		}
	}
	dir := t.TempDir()
	// A file path is used as is; an existing file is never overwritten. Its folder is not made
	// yet (the run makes it), so a request that fails later leaves none.
	p, err := outputTarget(filepath.Join(dir, "sub", "clip.MP4"), "x")
	if err != nil || p != filepath.Join(dir, "sub", "clip.MP4") {
		t.Fatalf("outputTarget file: %q, %v", p, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "sub")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("outputTarget made the folder: %v", err)
	}
	made, err := makeDirs(filepath.Join(dir, "sub"))
	if err != nil || len(made) != 1 || made[0] != filepath.Join(dir, "sub") {
		t.Fatalf("makeDirs: %v, %v", made, err)
	}
	if err := os.WriteFile(p, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if p2, _ := outputTarget(p, "x"); p2 != filepath.Join(dir, "sub", "clip_1.MP4") {
		t.Errorf("next free name %q", p2)
	}
	// A folder gets a name from the prompt; placeFile never replaces an existing file.
	p3, err := outputTarget(dir, "a red fox")
	if err != nil || p3 != filepath.Join(dir, "a_red_fox.mp4") {
		t.Fatalf("outputTarget folder: %q, %v", p3, err)
	}
	src := filepath.Join(dir, ".staged.mp4")
	if err := os.WriteFile(src, []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	final, err := placeFile(src, p) // p exists ("old")
	if err != nil || final != filepath.Join(dir, "sub", "clip_1.MP4") {
		t.Fatalf("placeFile: %q, %v", final, err)
	}
	if b, _ := os.ReadFile(p); string(b) != "old" {
		t.Error("placeFile replaced an existing file")
	}
	if _, err := os.Stat(src); !errors.Is(err, os.ErrNotExist) {
		t.Error("placeFile left the staged file")
	}
}

// TestOutputNameBounds: a name made from any prompt is short (80 bytes before ".mp4", whatever
// the script) and holds no control or bidirectional-override character.
func TestOutputNameBounds(t *testing.T) {
	dir := t.TempDir()
	cjk := strings.Repeat("狐狸在雪中奔跑", 18)[:120*3] // 120 three-byte characters
	p, err := outputTarget(dir, cjk)
	if err != nil {
		t.Fatal(err)
	}
	if base := filepath.Base(p); len(base) > 80+len(".mp4") || !strings.HasSuffix(base, ".mp4") || !strings.HasPrefix(base, "狐狸") {
		t.Errorf("a 120-character CJK prompt gives the name %q (%d bytes)", base, len(base))
	}
	for _, prompt := range []string{
		"evil\u202Egnp.mp4", "a\x00b\x1b[31mred\x7f", "\u2066fox\u2069 \u200Fcat\u200E", "line\r\nbreak\ttab", "\u061Cx\u2067y",
	} {
		name := fileNameFromPrompt(prompt)
		for _, r := range name {
			if unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) || unicode.Is(unicode.Cf, r) {
				t.Errorf("fileNameFromPrompt(%q) = %q holds %U", prompt, name, r)
			}
		}
	}
}

// TestOutputPathChecks: an output path that cannot be written fails at validate, before anything
// loads, naming the path the user gave.
func TestOutputPathChecks(t *testing.T) {
	dir := t.TempDir()
	paths := []string{filepath.Join(dir, "clip.txt"), "/proc/clip.mp4"}
	if os.Geteuid() != 0 { // root writes anywhere the permission bits forbid
		ro := filepath.Join(dir, "read-only")
		if err := os.Mkdir(ro, 0o555); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, filepath.Join(ro, "clip.mp4"), ro, filepath.Join(ro, "sub")+"/")
	}
	g := openGenerator(t, newTiny)
	g.loadHook = func(c string) { t.Errorf("%s loaded for an unwritable output", c) }
	for _, p := range paths {
		var events []Stage
		_, err := g.Generate(context.Background(), Request{Prompt: "a red fox", OutputPath: p, Progress: func(e Event) {
			if e.Kind == StageStart {
				events = append(events, e.Stage)
			}
		}})
		var re *RequestError
		if !errors.As(err, &re) || re.Field != "output_path" || !strings.Contains(err.Error(), p) {
			t.Errorf("output %s: %v, want an output_path RequestError naming it", p, err)
		}
		if len(events) != 1 || events[0] != StageValidate {
			t.Errorf("output %s: stages %v ran, want validate only", p, events)
		}
		if err := Validate("tiny-h3", Request{Prompt: "a red fox", OutputPath: p}); !errors.As(err, &re) || re.Field != "output_path" {
			t.Errorf("Validate with output %s: %v", p, err)
		}
	}
	if n := g.loads.Load(); n != 0 {
		t.Errorf("%d loads for unwritable outputs", n)
	}
	if names := testutil.DirNames(t, dir); len(names) > 1 {
		t.Errorf("the folder holds %v", names)
	}
}

// TestKilledRunLeftoversSwept: what a run killed with SIGKILL leaves in its output folder (the hidden
// staging file, the encoder's .part file and its audio track's .f32le, named as this SDK names them,
// and the .video.part of the earlier two-pass writer) is removed by the next generation into that
// folder once older than an hour; younger ones may be a live run's and stay.
func TestKilledRunLeftoversSwept(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "a_red_fox.mp4")
	staging, err := stagingPath(target)
	if err != nil {
		t.Fatal(err)
	}
	stem := filepath.Join(dir, "."+filepath.Base(staging)+".0123456789ab")
	old := []string{staging, stem + ".part", stem + ".video.part", filepath.Join(dir, "."+filepath.Base(staging)+".123456.f32le")}
	young := filepath.Join(dir, ".young.mp4.fastvideo-abcdefabcdef.mp4")
	for _, p := range append(old, young) {
		if err := os.WriteFile(p, []byte("left by a killed run"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range old {
		then := time.Now().Add(-2 * time.Hour)
		os.Chtimes(p, then, then)
	}
	if _, err := tinyGenerator(t).Generate(context.Background(), Request{Prompt: "a red fox", OutputPath: dir + string(filepath.Separator)}); err != nil {
		t.Fatal(err)
	}
	for _, p := range old {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s stayed: %v", filepath.Base(p), err)
		}
	}
	if _, err := os.Stat(young); err != nil {
		t.Errorf("a young staging file (maybe a live run's) was removed: %v", err)
	}
}
