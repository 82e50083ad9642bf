package main

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// mainArgsEnv makes the test binary run the command's Main with these arguments: the signal
// handling under test lives in Main, which only a separate process can receive signals in.
const mainArgsEnv = "T2VA_TEST_MAIN_ARGS"

// SIGTERM and SIGHUP during a generation stop it like Ctrl-C: exit 1 and no file, hidden or not,
// left in the output folder.
func TestSignalsLeaveNoFile(t *testing.T) {
	if args := os.Getenv(mainArgsEnv); args != "" {
		os.Args = append([]string{"t2va"}, strings.Fields(args)...)
		command.Main()
		return
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(os.Args[0], "-test.run=^TestSignalsLeaveNoFile$")
			// The longest tiny-h3 clip gives the decode stage, where the staging file exists, time to be hit.
			cmd.Env = append(os.Environ(), mainArgsEnv+"=-prompt fox -frames 345 -out "+dir+"/")
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			waitForFile(t, dir, 2*time.Minute)
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			err := cmd.Wait()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("exit: %v, want status 1 (cancelled)", err)
			}
			if left, _ := os.ReadDir(dir); len(left) != 0 {
				t.Fatalf("left in the output folder: %v", left)
			}
		})
	}
}

// waitForFile waits until dir holds a file (the writer's staging file: the run is decoding).
func waitForFile(t *testing.T, dir string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if entries, _ := os.ReadDir(dir); len(entries) > 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("the run never started writing")
}
