package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"fastvideo/examples/internal/clitest"
)

func TestExitCodes(t *testing.T) {
	loraDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(loraDir, "junk.safetensors"), []byte("not an adapter"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		code int
		says string
	}{
		{"help", []string{"-h"}, 0, "serve: " + summary},
		{"unknown flag", []string{"-port", "80"}, 2, "flag provided but not defined"},
		{"argument", []string{"tiny-h3"}, 2, "unexpected argument"},
		{"bad keep", []string{"-keep", "forever"}, 2, "-keep"},
		{"bad queue", []string{"-queue", "0"}, 2, "-queue"},
		{"bad address", []string{"-addr", ":8080x"}, 2, "invalid -addr"},
		{"no port", []string{"-addr", "127.0.0.1"}, 2, "invalid -addr"},
		{"port out of range", []string{"-addr", ":70000"}, 2, "invalid -addr"},
		{"unknown model", []string{"-model", "sora-2", "-data", t.TempDir()}, 2, "invalid model"},
		{"-lora without -lora-dir", []string{"-lora", "a.safetensors"}, 2, "-lora-dir"},
		{"-lora with a path", []string{"-lora-dir", loraDir, "-lora", "../junk.safetensors"}, 2, "invalid -lora"},
		{"-lora not listed", []string{"-lora-dir", loraDir, "-lora", "absent.safetensors:0.5"}, 2, "no adapter"},
		{"-lora not an adapter", []string{"-lora-dir", loraDir, "-lora", "junk.safetensors", "-backend", "go:ops_sequential", "-data", t.TempDir()}, 2, "invalid lora"},
		{"-compile-cache a file", []string{"-compile-cache", "/dev/null", "-backend", "go:ops_sequential", "-data", t.TempDir()}, 2, `invalid -compile-cache "/dev/null": allowed a folder this process can write`},
		{"address in use", []string{"-addr", "256.0.0.1:1", "-backend", "go:ops_sequential", "-data", t.TempDir()}, 1, "serve:"},
	}
	for _, c := range cases {
		var stderr bytes.Buffer
		code := run(context.Background(), c.args, "", &stderr, nil)
		if code != c.code || !strings.Contains(stderr.String(), c.says) {
			t.Errorf("%s: exit %d, want %d; stderr:\n%s", c.name, code, c.code, stderr.String())
		}
	}
}

func TestParseKeep(t *testing.T) {
	age, size, err := parseKeep("168h, 1.5GiB")
	if err != nil || age != 168*time.Hour || size != 3<<29 {
		t.Errorf("parseKeep: %v %v %v", age, size, err)
	}
	if _, size, _ := parseKeep("10GB"); size != 10e9 {
		t.Errorf("10GB: %d", size)
	}
}

// TestServeAndStop starts the binary's server, reads the models with the key from the
// environment, and stops it as SIGTERM would: exit code 0.
func TestServeAndStop(t *testing.T) {
	ctx, stop := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	code := make(chan int, 1)
	var stderr bytes.Buffer
	go func() {
		code <- run(ctx, []string{"-addr", "127.0.0.1:0", "-backend", "go:ops_sequential", "-data", t.TempDir()},
			"sesame", &stderr, func(a string) { addr <- a })
	}()
	var base string
	select {
	case base = <-addr:
	case c := <-code:
		t.Fatalf("exited %d: %s", c, stderr.String())
	}
	req, _ := http.NewRequest("GET", "http://"+base+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer sesame")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var models struct{ Data []struct{ ID string } }
	json.NewDecoder(resp.Body).Decode(&models)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(models.Data) != 1 || models.Data[0].ID != "tiny-h3" {
		t.Errorf("models: %d %+v", resp.StatusCode, models)
	}
	stop()
	if c := <-code; c != 0 {
		t.Errorf("exit %d after the stop signal: %s", c, stderr.String())
	}
}

// mainArgsEnv makes the test binary run main with these arguments: signal handling lives in main,
// which only a separate process can receive signals in.
const mainArgsEnv = "SERVE_TEST_MAIN_ARGS"

// TestSignalsShutDownCleanly: SIGTERM and SIGHUP (a closed terminal) stop a serving process with a
// clean shutdown, exit 0, on the built binary.
func TestSignalsShutDownCleanly(t *testing.T) {
	if args := os.Getenv(mainArgsEnv); args != "" {
		os.Args = append([]string{"serve"}, strings.Fields(args)...)
		main()
		return
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestSignalsShutDownCleanly$")
			cmd.Env = append(os.Environ(), mainArgsEnv+"=-addr 127.0.0.1:0 -backend go:ops_sequential -data "+t.TempDir())
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			serving := make(chan bool, 1)
			go func() {
				sc := bufio.NewScanner(stderr)
				found := false
				for sc.Scan() {
					if !found && strings.Contains(sc.Text(), "msg=serving") {
						found = true
						serving <- true
					}
				}
				if !found {
					serving <- false
				}
			}()
			if !<-serving {
				cmd.Wait()
				t.Fatal("the server never started")
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("after %s: %v, want exit status 0", sig, err)
			}
		})
	}
}

// readmeServe returns the README's serve command's arguments and the body of its first curl
// example, as a user copies them.
func readmeServe(t *testing.T) (args []string, body string) {
	t.Helper()
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(data)
	i := strings.Index(readme, "go run ./examples/serve ")
	if i < 0 {
		t.Fatal("the README has no serve command")
	}
	line := readme[i+len("go run ./examples/serve "):]
	line = line[:strings.IndexAny(line, "#\n")]
	j := strings.Index(readme, "-d '{")
	if j < 0 {
		t.Fatal("the README has no create request")
	}
	body = readme[j+len("-d '"):]
	return strings.Fields(line), body[:strings.Index(body, "'")]
}

// TestReadmeServeCommand runs the README's serve command as written, in a folder as a fresh clone
// would be (the default, relative -data included; only the address is a free loopback port, as the
// test cannot count on 8080), creates the README's video through it and downloads the MP4.
func TestReadmeServeCommand(t *testing.T) {
	if args := os.Getenv(mainArgsEnv); args != "" {
		os.Args = append([]string{"serve"}, strings.Fields(args)...)
		main()
		return
	}
	args, body := readmeServe(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestReadmeServeCommand$")
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), mainArgsEnv+"="+strings.Join(append(args, "-addr", "127.0.0.1:0"), " "))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }()
	base := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if _, addr, ok := strings.Cut(sc.Text(), "addr=http://"); ok {
				base <- "http://" + strings.Fields(addr)[0]
			}
		}
		close(base)
	}()
	url, ok := <-base
	if !ok {
		t.Fatal("the README's command did not start serving")
	}
	resp, err := http.Post(url+"/v1/videos", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var job struct {
		ID, Status string
		Error      any
	}
	json.NewDecoder(resp.Body).Decode(&job)
	resp.Body.Close()
	if resp.StatusCode != 200 || job.ID == "" {
		t.Fatalf("the README's request: %d %+v", resp.StatusCode, job)
	}
	for deadline := time.Now().Add(2 * time.Minute); job.Status != "completed"; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) || job.Status == "failed" {
			t.Fatalf("the job: %+v", job)
		}
		r, err := http.Get(url + "/v1/videos/" + job.ID)
		if err != nil {
			t.Fatal(err)
		}
		json.NewDecoder(r.Body).Decode(&job)
		r.Body.Close()
	}
	r, err := http.Get(url + "/v1/videos/" + job.ID + "/content")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	head := make([]byte, 12)
	if _, err := io.ReadFull(r.Body, head); err != nil || string(head[4:8]) != "ftyp" {
		t.Errorf("the video: %d %q %v", r.StatusCode, head, err)
	}
	if _, err := os.Stat(filepath.Join(cmd.Dir, "serve-data", "index.db")); err != nil {
		t.Errorf("the default data folder: %v", err)
	}
}

// TestReadmeListsEveryFlag: the README's flag table of serve is complete.
func TestReadmeListsEveryFlag(t *testing.T) {
	var help bytes.Buffer
	run(context.Background(), []string{"-h"}, "", &help, nil)
	clitest.CheckReadmeFlags(t, "serve", help.String())
}
