package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/jpeg"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"fastvideo/fastvideo"
	"fastvideo/internal/promptenhance"
)

// gen is the tiny-h3 generator every test's server shares (Generate serializes its calls).
var gen *fastvideo.VideoGenerator

func TestMain(m *testing.M) {
	var err error
	gen, err = fastvideo.New(context.Background(), "tiny-h3", fastvideo.WithBackend("go:ops_sequential"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	gen.Close()
	os.Exit(code)
}

// harness is a server on httptest with its data folder.
type harness struct {
	t    *testing.T
	s    *Server
	http *httptest.Server
	dir  string
	key  string
}

func start(t *testing.T, dir string, edit func(*Config)) *harness {
	t.Helper()
	cfg := Config{Generator: gen, DataDir: dir}
	if edit != nil {
		edit(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, s: s, http: httptest.NewServer(s.Handler()), dir: dir, key: cfg.APIKey}
	t.Cleanup(h.stop)
	return h
}

func (h *harness) stop() {
	h.s.Shutdown(0)
	h.http.Close()
}

// do sends a request and decodes a JSON answer into out (when not nil).
func (h *harness) do(method, path, contentType, body string, out any) *http.Response {
	h.t.Helper()
	req, err := http.NewRequest(method, h.http.URL+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if h.key != "" {
		req.Header.Set("Authorization", "Bearer "+h.key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			h.t.Fatalf("%s %s: %d %s: %v", method, path, resp.StatusCode, data, err)
		}
	}
	return resp
}

// create submits a job and fails the test unless it is accepted.
func (h *harness) create(body string) *Video {
	h.t.Helper()
	var v Video
	if resp := h.do("POST", "/v1/videos", "application/json", body, &v); resp.StatusCode != 200 {
		h.t.Fatalf("POST /v1/videos %s: %d", body, resp.StatusCode)
	}
	return &v
}

func (h *harness) get(id string) *Video {
	h.t.Helper()
	var v Video
	if resp := h.do("GET", "/v1/videos/"+id, "", "", &v); resp.StatusCode != 200 {
		h.t.Fatalf("GET %s: %d", id, resp.StatusCode)
	}
	return &v
}

// events reads a job's event stream to its end.
func (h *harness) events(id string) []Video {
	h.t.Helper()
	out, _ := h.eventsAndPreviews(id)
	return out
}

// eventsAndPreviews reads a job's event stream to its end: the job events and the preview events.
func (h *harness) eventsAndPreviews(id string) ([]Video, []previewEvent) {
	h.t.Helper()
	resp, err := http.Get(h.http.URL + "/v1/videos/" + id + "/events")
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		h.t.Fatalf("events Content-Type %q", ct)
	}
	var out []Video
	var previews []previewEvent
	var event string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if name, ok := strings.CutPrefix(line, "event: "); ok {
			event = name
		}
		if data, ok := strings.CutPrefix(line, "data: "); ok && event == "preview" {
			var p previewEvent
			if err := json.Unmarshal([]byte(data), &p); err != nil {
				h.t.Fatal(err)
			}
			previews = append(previews, p)
		} else if ok {
			var v Video
			if err := json.Unmarshal([]byte(data), &v); err != nil {
				h.t.Fatal(err)
			}
			if event != "video."+v.Status {
				h.t.Errorf("event %q carries status %q", event, v.Status)
			}
			out = append(out, v)
		}
	}
	return out, previews
}

// encoderFiles lists the videos folder once ffmpeg has created its staging file there: frames reach
// the encoder through a queue, so a decode event can come before ffmpeg, fed from another goroutine,
// has opened its file. It gives up after 10 s (then the caller's check fails).
func (h *harness) encoderFiles() []string {
	h.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if names := h.files(); len(names) > 0 {
			return names
		}
	}
	return nil
}

// files lists the videos folder, hidden staging files included.
func (h *harness) files() []string {
	h.t.Helper()
	entries, err := os.ReadDir(filepath.Join(h.dir, "videos"))
	if err != nil {
		h.t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// blockAt makes the next generation stop at the first event of kind until its context ends;
// the returned channel is closed when it gets there.
func blockAt(s *Server, kind fastvideo.EventKind) <-chan struct{} {
	reached := make(chan struct{})
	blocked := false
	s.progressHook = func(ctx context.Context, e fastvideo.Event) {
		if e.Kind != kind || blocked {
			return
		}
		blocked = true
		close(reached)
		<-ctx.Done()
	}
	return reached
}

func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(60 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func TestCreateEventsContent(t *testing.T) {
	h := start(t, t.TempDir(), nil)
	v := h.create(`{"model": "tiny-h3", "prompt": "a red fox", "size": "96x64", "seconds": "0.5", "seed": 7}`)
	if v.Object != "video" || v.finished() || v.Size != "96x64" || v.NumFrames != 22 || v.Seed != 7 {
		t.Fatalf("created %+v", v)
	}
	evs := h.events(v.ID)
	last := evs[len(evs)-1]
	if last.Status != statusCompleted || last.Progress != 100 || last.CompletedAt == nil || len(last.Timings) == 0 {
		t.Fatalf("last event %+v", last)
	}
	sawRunning := false
	for i, e := range evs {
		sawRunning = sawRunning || e.Status == statusInProgress
		if i > 0 && e.Progress < evs[i-1].Progress {
			t.Errorf("progress went back: %d then %d", evs[i-1].Progress, e.Progress)
		}
	}
	if !sawRunning || len(evs) < 3 {
		t.Errorf("%d events, in_progress seen: %v", len(evs), sawRunning)
	}
	checkContent(t, h, v.ID)

	var list struct {
		Object string  `json:"object"`
		Data   []Video `json:"data"`
	}
	h.do("GET", "/v1/videos?limit=5", "", "", &list)
	if list.Object != "list" || len(list.Data) != 1 || list.Data[0].ID != v.ID {
		t.Errorf("list %+v", list)
	}
	var deleted map[string]any
	h.do("DELETE", "/v1/videos/"+v.ID, "", "", &deleted)
	if deleted["deleted"] != true || len(h.files()) != 0 {
		t.Errorf("delete: %v, files left %v", deleted, h.files())
	}
	if resp := h.do("GET", "/v1/videos/"+v.ID, "", "", nil); resp.StatusCode != 404 {
		t.Errorf("GET after DELETE: %d", resp.StatusCode)
	}
}

// checkContent downloads a completed job's MP4, probes it and asks for a byte range.
func checkContent(t *testing.T, h *harness, id string) {
	t.Helper()
	resp, err := http.Get(h.http.URL + "/v1/videos/" + id + "/content")
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "video/mp4" {
		t.Fatalf("content: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	path := filepath.Join(t.TempDir(), "got.mp4")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := probe(t, path); got != "video h264 96x64 22 frames; audio aac" {
		t.Errorf("ffprobe: %s", got)
	}
	req, _ := http.NewRequest("GET", h.http.URL+"/v1/videos/"+id+"/content", nil)
	req.Header.Set("Range", "bytes=100-199")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	part, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := fmt.Sprintf("bytes 100-199/%d", len(data))
	if resp.StatusCode != http.StatusPartialContent || resp.Header.Get("Content-Range") != want || string(part) != string(data[100:200]) {
		t.Errorf("range: %d %q, %d bytes", resp.StatusCode, resp.Header.Get("Content-Range"), len(part))
	}
}

// probe describes an MP4's streams as ffprobe ($FASTVIDEO_FFPROBE, else the one on PATH) reads
// them.
func probe(t *testing.T, path string) string {
	t.Helper()
	ffprobe := os.Getenv("FASTVIDEO_FFPROBE")
	if ffprobe == "" {
		ffprobe = "ffprobe"
	}
	out, err := exec.Command(ffprobe, "-v", "error", "-count_frames", "-print_format", "json",
		"-show_entries", "stream=codec_type,codec_name,width,height,nb_read_frames", path).Output()
	if err != nil {
		t.Fatalf("ffprobe %s: %v", path, err)
	}
	var info struct {
		Streams []struct {
			CodecType string `json:"codec_type"`
			CodecName string `json:"codec_name"`
			Width     int    `json:"width"`
			Height    int    `json:"height"`
			Frames    string `json:"nb_read_frames"`
		}
	}
	if err := json.Unmarshal(out, &info); err != nil {
		t.Fatal(err)
	}
	var parts []string
	for _, s := range info.Streams {
		if s.CodecType == "video" {
			parts = append(parts, fmt.Sprintf("video %s %dx%d %s frames", s.CodecName, s.Width, s.Height, s.Frames))
		} else {
			parts = append(parts, s.CodecType+" "+s.CodecName)
		}
	}
	return strings.Join(parts, "; ")
}

func TestBadRequests(t *testing.T) {
	h := start(t, t.TempDir(), func(c *Config) { c.MaxPromptBytes = 64; c.MaxBodyBytes = 1024 })
	cases := []struct {
		name, contentType, body string
		status                  int
		param                   string
	}{
		{"no prompt", "application/json", `{"size": "96x64"}`, 400, "prompt"},
		{"blank prompt", "application/json", `{"prompt": "  "}`, 400, "prompt"},
		{"long prompt", "application/json", `{"prompt": "` + strings.Repeat("a", 65) + `"}`, 400, "prompt"},
		{"other model", "application/json", `{"prompt": "x", "model": "sora-2"}`, 400, "model"},
		{"size not WxH", "application/json", `{"prompt": "x", "size": "large"}`, 400, "size"},
		{"size off the VAE grid", "application/json", `{"prompt": "x", "size": "100x64"}`, 400, "size"},
		{"seconds and frames", "application/json", `{"prompt": "x", "seconds": 1, "num_frames": 22}`, 400, "seconds"},
		{"negative seconds", "application/json", `{"prompt": "x", "seconds": -1}`, 400, "seconds"},
		{"frames out of range", "application/json", `{"prompt": "x", "num_frames": 100000}`, 400, "num_frames"},
		{"seconds out of range, named as sent", "application/json", `{"prompt": "x", "seconds": 1000}`, 400, "seconds"},
		{"a duplicate key", "application/json", `{"prompt": "x", "prompt": "y"}`, 400, ""},
		{"fps the model cannot", "application/json", `{"prompt": "x", "fps": 30}`, 400, "fps"},
		{"steps not a number", "application/json", `{"prompt": "x", "num_inference_steps": "four"}`, 400, "num_inference_steps"},
		{"steps twice", "application/json", `{"prompt": "x", "steps": 2, "num_inference_steps": 2}`, 400, "steps"},
		{"seed not a number", "application/json", `{"prompt": "x", "seed": "abc"}`, 400, "seed"},
		{"unknown preset", "application/json", `{"prompt": "x", "preset": "nope"}`, 400, "preset"},
		{"negative prompt without guidance", "application/json", `{"prompt": "x", "negative_prompt": "blur"}`, 400, "negative_prompt"},
		{"a path", "application/json", `{"prompt": "x", "output_path": "/etc/passwd"}`, 400, "output_path"},
		{"an image", "application/json", `{"prompt": "x", "input_reference": "cat.png"}`, 400, "input_reference"},
		{"not JSON", "application/json", `{"prompt": `, 400, ""},
		{"form field twice", "application/x-www-form-urlencoded", `prompt=a&prompt=b`, 400, "prompt"},
		{"form number", "application/x-www-form-urlencoded", `prompt=a&num_frames=many`, 400, "num_frames"},
		{"too large", "application/json", `{"prompt": "` + strings.Repeat("a", 2000) + `"}`, 413, ""},
		{"XML", "application/xml", `<prompt/>`, 415, ""},
	}
	for _, c := range cases {
		var body struct{ Error APIError }
		resp := h.do("POST", "/v1/videos", c.contentType, c.body, &body)
		if resp.StatusCode != c.status || body.Error.Param != c.param || body.Error.Message == "" {
			t.Errorf("%s: %d %+v, want %d with param %q", c.name, resp.StatusCode, body.Error, c.status, c.param)
		}
	}
	for _, path := range []string{"/v1/videos/video_000000000000000000000000", "/v1/videos/..%2Findex.db", "/v1/videos/x/content"} {
		if resp := h.do("GET", path, "", "", nil); resp.StatusCode != 404 {
			t.Errorf("GET %s: %d", path, resp.StatusCode)
		}
	}
	if n := len(h.files()); n != 0 {
		t.Errorf("bad requests left %d files", n)
	}
}

func TestAPIKey(t *testing.T) {
	h := start(t, t.TempDir(), func(c *Config) { c.APIKey = "sesame" })
	if resp := h.do("GET", "/v1/models", "", "", nil); resp.StatusCode != 200 {
		t.Errorf("with the key: %d", resp.StatusCode)
	}
	h.key = "wrong"
	if resp := h.do("GET", "/v1/models", "", "", nil); resp.StatusCode != 401 {
		t.Errorf("with a wrong key: %d", resp.StatusCode)
	}
	if resp := h.do("GET", "/", "", "", nil); resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Errorf("the page: %d", resp.StatusCode)
	}
}

// TestQueueFullAndCancel holds the first job in its decode stage (its staging file written) and
// fills the one-place queue behind it: the next request gets 429; cancelling the queued job and
// then the running one leaves no file.
func TestQueueFullAndCancel(t *testing.T) {
	h := start(t, t.TempDir(), func(c *Config) { c.QueueSize = 1 })
	reached := blockAt(h.s, fastvideo.DecodeProgress)
	running := h.create(`{"prompt": "first"}`)
	queued := h.create(`{"prompt": "second"}`)
	wait(t, reached, "the first job's decode")
	if len(h.encoderFiles()) == 0 {
		t.Errorf("no staging file while decoding")
	}
	var body struct{ Error APIError }
	resp := h.do("POST", "/v1/videos", "application/json", `{"prompt": "third"}`, &body)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || body.Error.Code != "queue_full" {
		t.Fatalf("full queue: %d Retry-After %q %+v", resp.StatusCode, resp.Header.Get("Retry-After"), body.Error)
	}
	if q := h.get(queued.ID); q.Status != statusQueued || q.QueuePosition == nil || *q.QueuePosition != 1 {
		t.Errorf("queued job: %+v", q)
	}
	if r := h.get(running.ID); r.Status != statusInProgress || r.Stage != "decode" || r.Progress < 85 {
		t.Errorf("running job: %+v", r)
	}
	var v Video
	h.do("DELETE", "/v1/videos/"+queued.ID, "", "", &v)
	if v.Status != statusCancelled {
		t.Errorf("cancelled queued job: %+v", v)
	}
	h.do("DELETE", "/v1/videos/"+running.ID, "", "", &v)
	if v.Status != statusCancelled || v.Error != nil {
		t.Errorf("cancelled running job: %+v", v)
	}
	if files := h.files(); len(files) != 0 {
		t.Errorf("files left after cancelling: %v", files)
	}
	for _, id := range []string{queued.ID, running.ID} {
		if got := h.get(id); got.Status != statusCancelled {
			t.Errorf("%s reads %s", id, got.Status)
		}
	}
	if evs := h.events(running.ID); len(evs) != 1 || evs[0].Status != statusCancelled {
		t.Errorf("events of a cancelled job: %+v", evs)
	}
}

func TestTimeout(t *testing.T) {
	h := start(t, t.TempDir(), func(c *Config) { c.JobTimeout = 200 * time.Millisecond })
	blockAt(h.s, fastvideo.DenoiseStep)
	v := h.create(`{"prompt": "slow"}`)
	evs := h.events(v.ID)
	last := evs[len(evs)-1]
	if last.Status != statusFailed || last.Error == nil || last.Error.Code != "timeout" || len(h.files()) != 0 {
		t.Errorf("timed out job: %+v, files %v", last, h.files())
	}
}

// TestShutdown: queued jobs fail at once, the running one gets the grace period and is then
// cancelled without leaving a file, and no job is accepted afterwards.
func TestShutdown(t *testing.T) {
	h := start(t, t.TempDir(), nil)
	reached := blockAt(h.s, fastvideo.DecodeProgress)
	running := h.create(`{"prompt": "first"}`)
	queued := h.create(`{"prompt": "second"}`)
	wait(t, reached, "the first job's decode")
	lastEvent := make(chan string, 1) // the queued job's event stream, read to its end
	streaming := make(chan struct{})
	go func() {
		resp, err := http.Get(h.http.URL + "/v1/videos/" + queued.ID + "/events")
		if err != nil {
			lastEvent <- err.Error()
			return
		}
		defer resp.Body.Close()
		last := ""
		for sc := bufio.NewScanner(resp.Body); sc.Scan(); {
			if name, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
				if last == "" {
					close(streaming)
				}
				last = name
			}
		}
		lastEvent <- last
	}()
	wait(t, streaming, "the queued job's event stream")
	begin := time.Now()
	if err := h.s.Shutdown(300 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	select {
	case last := <-lastEvent:
		if last != "video.failed" {
			t.Errorf("the queued job's stream ended with %q", last)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("an event stream outlived the shutdown")
	}
	if took := time.Since(begin); took < 300*time.Millisecond {
		t.Errorf("shutdown took %v, less than the grace period", took)
	}
	if files := h.files(); len(files) != 0 {
		t.Errorf("files left: %v", files)
	}
	var body struct{ Error APIError }
	if resp := h.do("POST", "/v1/videos", "application/json", `{"prompt": "late"}`, &body); resp.StatusCode != 503 {
		t.Errorf("POST after shutdown: %d", resp.StatusCode)
	}
	st, err := openStore(h.dir, "reader")
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	for _, id := range []string{running.ID, queued.ID} {
		v, _, err := st.get(id)
		if err != nil || v.Status != statusFailed || v.Error.Code != "server_shutdown" {
			t.Errorf("%s after shutdown: %+v %v", id, v, err)
		}
	}
}

// TestRestart: a second server on the same data folder while the first one is stuck in a job
// (as if it had crashed: same host, its owner no longer the running process) serves the finished
// job and reports the running one failed, and removes a stale staging file but not a fresh one.
func TestRestart(t *testing.T) {
	dir := t.TempDir()
	first := start(t, dir, nil)
	done := first.create(`{"prompt": "finished before the crash"}`)
	if evs := first.events(done.ID); evs[len(evs)-1].Status != statusCompleted {
		t.Fatalf("first job: %+v", evs[len(evs)-1])
	}
	reached := blockAt(first.s, fastvideo.DenoiseStep)
	stuck := first.create(`{"prompt": "running at the crash"}`)
	wait(t, reached, "the second job's denoising")
	stale := filepath.Join(dir, "videos", ".video_0123456789abcdef01234567.mp4.fastvideo-000000000000.mp4")
	if err := os.WriteFile(stale, []byte("half a video"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-48 * time.Hour)
	os.Chtimes(stale, old, old)
	// A staging file being written now may be another live process's: it stays.
	fresh := filepath.Join(dir, "videos", ".video_89abcdef0123456789abcdef.mp4.fastvideo-000000000000.mp4")
	if err := os.WriteFile(fresh, []byte("a quarter of a video"), 0o644); err != nil {
		t.Fatal(err)
	}

	// The first process "dies": the kernel drops its lock on the folder; its goroutines wake later.
	if err := first.s.unlock(); err != nil {
		t.Fatal(err)
	}
	first.s.unlock = func() error { return nil }
	second := start(t, dir, nil)
	if v := second.get(done.ID); v.Status != statusCompleted {
		t.Errorf("finished job after restart: %+v", v)
	}
	checkContent(t, second, done.ID)
	v := second.get(stuck.ID)
	if v.Status != statusFailed || v.Error == nil || v.Error.Code != "server_restarted" || v.CompletedAt == nil {
		t.Errorf("running job after restart: %+v", v)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale staging file kept: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("fresh staging file removed: %v", err)
	}
	first.stop() // the first server wakes up: it must not overwrite the verdict
	if v := second.get(stuck.ID); v.Error == nil || v.Error.Code != "server_restarted" {
		t.Errorf("the first server overwrote the verdict: %+v", v)
	}
}

func TestExpiry(t *testing.T) {
	h := start(t, t.TempDir(), nil)
	now := time.Now()
	add := func(age time.Duration, size int) string {
		id, _ := newVideoID()
		v := &Video{ID: id, Object: "video", Status: statusQueued, CreatedAt: now.Add(-age).Unix()}
		if err := h.s.st.insert(v, fastvideo.Request{Prompt: "x"}, now); err != nil {
			t.Fatal(err)
		}
		v.Status = statusCompleted
		if err := h.s.st.update(v, outputName(id), int64(size)); err != nil {
			t.Fatal(err)
		}
		h.s.st.db.Exec(`UPDATE jobs SET finished_at = ? WHERE id = ?`, now.Add(-age).UnixMilli(), id)
		os.WriteFile(filepath.Join(h.dir, "videos", outputName(id)), make([]byte, size), 0o644)
		return id
	}
	oldest, older, newer, newest := add(3*time.Hour, 100), add(2*time.Hour, 100), add(time.Hour, 100), add(0, 100)
	h.s.keep = keepPolicy{maxAge: 150 * time.Minute, maxBytes: 250}
	if err := h.s.expire(); err != nil {
		t.Fatal(err)
	}
	for id, kept := range map[string]bool{oldest: false, older: false, newer: true, newest: true} {
		_, _, err := h.s.st.get(id)
		_, serr := os.Stat(filepath.Join(h.dir, "videos", outputName(id)))
		if (err == nil) != kept || (serr == nil) != kept {
			t.Errorf("%s: row %v, file %v, want kept %v", id, err, serr, kept)
		}
	}
}

// TestRelativeDataDir: the index opens in a data folder given relative to the working directory, as
// the default -data ("serve-data") is.
func TestRelativeDataDir(t *testing.T) {
	t.Chdir(t.TempDir())
	if err := os.Mkdir("serve-data", 0o755); err != nil {
		t.Fatal(err)
	}
	st, err := openStore("serve-data", "relative")
	if err != nil {
		t.Fatalf("a relative data folder: %v", err)
	}
	st.close()
	if _, err := os.Stat(filepath.Join("serve-data", "index.db")); err != nil {
		t.Errorf("the index is not in the relative folder: %v", err)
	}
}

// TestEmptyListAndModels: an empty video list is [] (not null), and the model object advertises no
// image input, which the server refuses (a text-to-video server whatever the model takes).
func TestEmptyListAndModels(t *testing.T) {
	h := start(t, t.TempDir(), nil)
	var raw map[string]json.RawMessage
	if resp := h.do("GET", "/v1/videos", "", "", &raw); resp.StatusCode != 200 || string(raw["data"]) != "[]" {
		t.Errorf("empty list: %d, data %s", resp.StatusCode, raw["data"])
	}
	var models struct {
		Data []map[string]any `json:"data"`
	}
	if resp := h.do("GET", "/v1/models", "", "", &models); resp.StatusCode != 200 || len(models.Data) != 1 {
		t.Fatalf("models: %d %+v", resp.StatusCode, models)
	}
	if _, first := models.Data[0]["first_image"]; first {
		t.Errorf("the model object advertises image input: %v", models.Data[0])
	}
	if _, last := models.Data[0]["last_image"]; last {
		t.Errorf("the model object advertises a last keyframe: %v", models.Data[0])
	}
}

// TestPageHidesPlayer: the page's own rules must not show an element marked hidden (the player
// before any video): a display rule on video beats the browser's [hidden] default unless the page
// restores it.
func TestPageHidesPlayer(t *testing.T) {
	page := string(page)
	if !strings.Contains(page, `<video id="video" controls playsinline hidden>`) {
		t.Fatal("the page no longer starts with a hidden player; update this test")
	}
	if strings.Contains(page, "display: block") && !strings.Contains(page, "[hidden] { display: none !important; }") {
		t.Error("a display rule shows the hidden player: the page needs [hidden] { display: none !important; }")
	}
}

// TestIndexIsPrivate: the job index (every prompt) is readable by its owner alone, also when an
// earlier version left it readable by others.
func TestIndexIsPrivate(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "index.db")
	for _, before := range []os.FileMode{0, 0o644} {
		if before != 0 {
			if err := os.Chmod(path, before); err != nil {
				t.Fatal(err)
			}
		}
		st, err := openStore(dir, "private")
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := st.list(1, "", true); err != nil {
			t.Fatal(err)
		}
		st.close()
		info, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if perm := info.Mode().Perm(); perm&0o077 != 0 {
			t.Errorf("index.db is %v (before: %v), want owner-only", perm, before)
		}
	}
}

// TestBrowserGuards: without an API key, a Host that is not an IP address, localhost or an allowed
// name is refused (DNS rebinding), a state-changing request from another origin is refused, and
// every response, errors and the page included, forbids sniffing and framing; with a key the Host
// and origin rules give way to the token.
func TestBrowserGuards(t *testing.T) {
	h := start(t, t.TempDir(), func(c *Config) { c.AllowedHosts = []string{"video.lan"} })
	send := func(method, path, host string, header map[string]string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(method, h.http.URL+path, strings.NewReader(`{"prompt": "a fox", "seconds": "1"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if host != "" {
			req.Host = host
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	for _, c := range []struct {
		name, method, path, host string
		header                   map[string]string
		status                   int
	}{
		{"an IP address", "GET", "/v1/models", "", nil, 200},
		{"localhost", "GET", "/v1/models", "localhost:8080", nil, 200},
		{"an allowed name", "GET", "/", "VIDEO.lan:8080", nil, 200},
		{"a rebinding domain", "GET", "/v1/models", "attacker.example:8080", nil, 403},
		{"a rebinding domain, the page", "GET", "/", "attacker.example", nil, 403},
		{"a post from another origin", "POST", "/v1/videos", "", map[string]string{"Origin": "http://attacker.example"}, 403},
		{"a post from a sandboxed page", "POST", "/v1/videos", "", map[string]string{"Origin": "null"}, 403},
		{"a delete marked cross-site", "DELETE", "/v1/videos/video_000000000000000000000000", "", map[string]string{"Sec-Fetch-Site": "cross-site"}, 403},
		{"a cross-origin read", "GET", "/v1/models", "", map[string]string{"Origin": "http://attacker.example"}, 200},
	} {
		resp := send(c.method, c.path, c.host, c.header)
		if resp.StatusCode != c.status {
			t.Errorf("%s: %d, want %d", c.name, resp.StatusCode, c.status)
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'") ||
			resp.Header.Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s: headers %v", c.name, resp.Header)
		}
	}
	// A post from the server's own page is the same origin.
	if resp := send("POST", "/v1/videos", "", map[string]string{"Origin": h.http.URL}); resp.StatusCode != 200 {
		t.Errorf("a same-origin post: %d", resp.StatusCode)
	}
	keyed := start(t, t.TempDir(), func(c *Config) { c.APIKey = "sesame" })
	req, _ := http.NewRequest("GET", keyed.http.URL+"/v1/models", nil)
	req.Host = "attacker.example"
	req.Header.Set("Authorization", "Bearer sesame")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("with a key, any Host: %d %v", resp.StatusCode, resp.Header)
	}
}

// TestSlowBodyTimesOut: a create request whose body does not arrive within BodyTimeout is answered
// 408 and its connection closed, rather than held for as long as the client trickles.
func TestSlowBodyTimesOut(t *testing.T) {
	h := start(t, t.TempDir(), func(c *Config) { c.BodyTimeout = 200 * time.Millisecond })
	c, err := net.Dial("tcp", strings.TrimPrefix(h.http.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /v1/videos HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Errorf("a slow body: %d, want 408", resp.StatusCode)
	}
}

// TestFinishedVideoAdopted: a video renamed into place whose job lost its index write (the job is
// still in progress in the index when the server restarts) is adopted: the job completes with it and
// serves it, and the file stays; an output whose job was deleted is still removed.
func TestFinishedVideoAdopted(t *testing.T) {
	dir := t.TempDir()
	first := start(t, dir, nil)
	id, _ := newVideoID()
	now := time.Now()
	v := &Video{ID: id, Object: "video", Status: statusQueued, CreatedAt: now.Unix(), Prompt: "x"}
	if err := first.s.st.insert(v, fastvideo.Request{Prompt: "x"}, now); err != nil {
		t.Fatal(err)
	}
	v.Status = statusInProgress
	if err := first.s.st.update(v, "", 0); err != nil {
		t.Fatal(err)
	}
	video := filepath.Join(dir, "videos", outputName(id))
	deletedJob, _ := newVideoID()
	orphan := filepath.Join(dir, "videos", outputName(deletedJob))
	for _, p := range []string{video, orphan} {
		if err := os.WriteFile(p, []byte("a finished video"), 0o644); err != nil {
			t.Fatal(err)
		}
		old := now.Add(-time.Hour)
		os.Chtimes(p, old, old)
	}
	first.stop()
	second := start(t, dir, nil)
	got := second.get(id)
	if got.Status != statusCompleted || got.Error != nil || got.Progress != 100 {
		t.Errorf("the job of a renamed video after restart: %+v", got)
	}
	if _, err := os.Stat(video); err != nil {
		t.Errorf("the finished video was removed: %v", err)
	}
	if resp := second.do("GET", "/v1/videos/"+id+"/content", "", "", nil); resp.StatusCode != 200 {
		t.Errorf("its content: %d", resp.StatusCode)
	}
	if _, err := os.Stat(orphan); !os.IsNotExist(err) {
		t.Errorf("the output of a job that does not exist was kept: %v", err)
	}
}

// TestOneServerPerDataDir: a second server on a data folder in use refuses to start, naming the
// folder and the fix, and starts once the first has shut down.
func TestOneServerPerDataDir(t *testing.T) {
	dir := t.TempDir()
	first := start(t, dir, nil)
	if _, err := New(Config{Generator: gen, DataDir: dir}); err == nil || !strings.Contains(err.Error(), "another server is using the data folder") {
		t.Fatalf("a second server on the folder: %v", err)
	}
	first.stop()
	second, err := New(Config{Generator: gen, DataDir: dir})
	if err != nil {
		t.Fatalf("after the first stopped: %v", err)
	}
	second.Shutdown(0)
}

// TestRedactHostPaths: messages a client reads name the data folder and the home folder by
// placeholders, not by this machine's paths.
func TestRedactHostPaths(t *testing.T) {
	h := start(t, t.TempDir(), nil)
	home, err := os.UserHomeDir()
	if err != nil {
		t.Skip("no home folder")
	}
	msg := h.s.redact("writing " + filepath.Join(h.s.cfg.DataDir, "videos", "x.mp4") + " after reading " + filepath.Join(home, "models", "h3"))
	if strings.Contains(msg, h.s.cfg.DataDir) || strings.Contains(msg, home+string(filepath.Separator)) ||
		!strings.Contains(msg, "<data>"+string(filepath.Separator)+"videos") {
		t.Errorf("redacted: %q", msg)
	}
}

// TestEnhancePromptField: enhance_prompt rewrites the prompt with the SDK's template enhancer; the
// job keeps the client's prompt and reports the one the model ran on.
func TestEnhancePromptField(t *testing.T) {
	h := start(t, t.TempDir(), nil)
	v := h.create(`{"prompt": "a red fox", "enhance_prompt": true}`)
	evs := h.events(v.ID)
	last := evs[len(evs)-1]
	want, err := promptenhance.Template("a red fox")
	if err != nil {
		t.Fatal(err)
	}
	if last.Status != statusCompleted || last.Prompt != "a red fox" || last.PromptUsed != want {
		t.Errorf("job %s: prompt %q, used %q; want %q", last.Status, last.Prompt, last.PromptUsed, want)
	}
	if plain := h.create(`{"prompt": "a red fox"}`); h.events(plain.ID)[0].PromptUsed != "" {
		t.Error("a job without enhance_prompt reports a used prompt")
	}
}

// TestPreviewEvents: a job with "preview" and "decoder": "tiny" streams "preview" events (JPEGs of
// its steps, in order, at most one per step) beside its job events and completes; a job without
// previews streams none, and an unknown decoder is refused at admission.
func TestPreviewEvents(t *testing.T) {
	h := start(t, t.TempDir(), nil)
	v := h.create(`{"prompt": "a red fox", "size": "96x64", "seconds": "0.5", "decoder": "tiny", "preview": true}`)
	evs, previews := h.eventsAndPreviews(v.ID)
	last := evs[len(evs)-1]
	if last.Status != statusCompleted {
		t.Fatalf("job %+v", last)
	}
	if len(previews) == 0 || len(previews) > last.NumInferenceSteps {
		t.Fatalf("%d preview events for %d steps", len(previews), last.NumInferenceSteps)
	}
	for i, p := range previews {
		img, err := jpeg.Decode(bytes.NewReader(p.Data))
		if err != nil || p.MIME != "image/jpeg" || p.ID != v.ID || img.Bounds().Dx() != p.Width || img.Bounds().Dy() != p.Height ||
			(i > 0 && p.Step <= previews[i-1].Step) {
			t.Errorf("preview %d: %+v (%v)", i, p, err)
		}
	}
	if _, previews := h.eventsAndPreviews(h.create(`{"prompt": "a red fox", "size": "96x64", "seconds": "0.5"}`).ID); len(previews) != 0 {
		t.Errorf("a job without previews streamed %d", len(previews))
	}
	var e struct{ Error APIError }
	if resp := h.do("POST", "/v1/videos", "application/json", `{"prompt": "a red fox", "decoder": "fast"}`, &e); resp.StatusCode != 400 || e.Error.Param != "decoder" {
		t.Errorf("decoder \"fast\": %d %+v", resp.StatusCode, e)
	}
}

// TestLongCJKPromptRefusedAtAdmission: a prompt the SDK's estimate undercounts (1,365 CJK characters,
// over H3's 1,024 tokens) is a 400 naming the prompt when submitted, not a job that fails later.
func TestLongCJKPromptRefusedAtAdmission(t *testing.T) {
	h := start(t, t.TempDir(), nil)
	var b strings.Builder
	for i := range 1365 {
		b.WriteRune(rune(0x4e00 + 37*i%20000))
	}
	body, _ := json.Marshal(map[string]string{"prompt": b.String()})
	var out struct{ Error APIError }
	if resp := h.do("POST", "/v1/videos", "application/json", string(body), &out); resp.StatusCode != 400 || out.Error.Param != "prompt" || !strings.Contains(out.Error.Message, "tokens") {
		t.Errorf("a 1,365-character CJK prompt: %d %+v, want 400 naming the prompt", resp.StatusCode, out.Error)
	}
}

// TestLoRAs: "loras" names adapters by file name within the adapter folder, and only the set the
// generator merged at start is admitted; paths, links, folders, unlisted names and another set are 400s
// naming "loras".
func TestLoRAs(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.safetensors"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub.safetensors"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "link.safetensors")); err != nil {
		t.Fatal(err)
	}
	h := start(t, t.TempDir(), func(c *Config) { c.LoRADir, c.LoRA = dir, []LoRA{{Name: "a.safetensors", Strength: 0.8}} })
	bare := start(t, t.TempDir(), nil)
	var models struct{ Data []struct{ LoRAs []LoRA } }
	if h.do("GET", "/v1/models", "", "", &models); len(models.Data) != 1 || len(models.Data[0].LoRAs) != 1 || models.Data[0].LoRAs[0].Strength != 0.8 {
		t.Errorf("models %+v", models)
	}
	for _, c := range []struct {
		h     *harness
		loras string
		ok    bool
	}{
		{h, `[{"name": "a.safetensors", "strength": 0.8}]`, true},
		{h, `null`, true},
		{bare, `[]`, true},
		{h, `[{"name": "a.safetensors"}]`, false},
		{h, `[]`, false},
		{h, `[{"name": "../a.safetensors", "strength": 0.8}]`, false},
		{h, `[{"name": "` + filepath.Join(dir, "a.safetensors") + `", "strength": 0.8}]`, false},
		{h, `[{"name": "/etc/passwd"}]`, false},
		{h, `[{"name": "sub.safetensors"}]`, false},
		{h, `[{"name": "link.safetensors"}]`, false},
		{h, `[{"name": "absent.safetensors"}]`, false},
		{h, `[{"name": "a.safetensors", "path": "/etc/passwd"}]`, false},
		{h, `"a.safetensors"`, false},
		{bare, `[{"name": "a.safetensors"}]`, false},
	} {
		var body struct{ Error APIError }
		resp := c.h.do("POST", "/v1/videos", "application/json", `{"prompt": "a fox", "num_inference_steps": 1, "loras": `+c.loras+`}`, &body)
		if ok := resp.StatusCode == 200; ok != c.ok || (!ok && (resp.StatusCode != 400 || body.Error.Param != "loras")) {
			t.Errorf("loras %s: %d %+v, want accepted %v (else a 400 naming loras)", c.loras, resp.StatusCode, body.Error, c.ok)
		}
	}
}
