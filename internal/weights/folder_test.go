package weights

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"fastvideo/internal/safetensors"
)

func TestFromFolder(t *testing.T) {
	dir := t.TempDir()
	if err := safetensors.WriteFile(filepath.Join(dir, "m.safetensors"), []safetensors.Tensor{f32("w", []int{2}, 1, 2)}, nil); err != nil {
		t.Fatal(err)
	}
	readCfg := func(d string) (string, error) { return "cfg:" + filepath.Base(d), nil }
	got, err := FromFolder(dir, "test", readCfg, func(cfg string, src Source) (string, error) {
		info, ok := src.Tensor("w")
		if !ok || len(info.Shape) != 1 {
			return "", errors.New("tensor w not found")
		}
		return cfg, nil
	})
	if err != nil || got != "cfg:"+filepath.Base(dir) {
		t.Fatalf("FromFolder = %q, %v", got, err)
	}

	// A config failure is returned as is; a folder without weights names the caller.
	bad := errors.New("bad config")
	if _, err := FromFolder(dir, "test", func(string) (string, error) { return "", bad }, func(string, Source) (int, error) { return 1, nil }); !errors.Is(err, bad) {
		t.Errorf("config failure = %v, want %v", err, bad)
	}
	if _, err := FromFolder(t.TempDir(), "test", readCfg, func(string, Source) (int, error) { return 1, nil }); err == nil || !strings.HasPrefix(err.Error(), "test: opening the weights") {
		t.Errorf("empty folder = %v, want an error starting with the caller's name", err)
	}
}
