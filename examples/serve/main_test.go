package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestExitCodes(t *testing.T) {
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
