package modelcfg

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type cfg struct{ Width int }

func parse(b []byte) (c cfg, err error) {
	if err := json.Unmarshal(b, &c); err != nil {
		return cfg{}, err
	}
	if c.Width <= 0 {
		return cfg{}, errors.New("width must be positive")
	}
	return c, nil
}

func TestRead(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "config.json")
	if err := os.WriteFile(file, []byte(`{"Width": 3}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, file} {
		if c, err := Read(p, parse, "pkg", ""); err != nil || c.Width != 3 {
			t.Errorf("Read(%s) = %+v, %v", p, c, err)
		}
	}
	missing := filepath.Join(dir, "nowhere")
	_, err := Read(missing, parse, "pkg: reading the config", "pass the vae/ folder")
	if err == nil || !strings.HasPrefix(err.Error(), "pkg: reading the config: ") || !strings.Contains(err.Error(), filepath.Join(missing, "config.json")) ||
		!strings.HasSuffix(err.Error(), "(pass the vae/ folder)") || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing folder: %v", err)
	}
	if err := os.WriteFile(file, []byte(`{"Width": 0}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(dir, parse, "pkg", ""); err == nil || err.Error() != "width must be positive (in "+file+")" {
		t.Errorf("invalid config: %v", err)
	}
}

func TestProblems(t *testing.T) {
	var p Problems
	if p.Err("pkg") != nil {
		t.Fatal("no problems must give no error")
	}
	p.Positive("width", 3)
	p.Positive("depth", 0)
	p.Positive("vocab", MaxSize+1) // a claim no real model makes, that would only exhaust memory
	p.Layers("layers", 1e9)
	p.Layers("blocks", MaxLayers)
	p.Add("eps = %g must be positive", -1.0)
	want := "pkg: invalid config: depth = 0 must be in 1..1048576; vocab = 1048577 must be in 1..1048576; " +
		"layers = 1000000000 must be in 1..1024; eps = -1 must be positive"
	if err := p.Err("pkg"); err == nil || err.Error() != want {
		t.Errorf("Err = %v", err)
	}
	if err := CheckSize("pkg", "clip_length", 1<<40, 1024); err == nil || !strings.Contains(err.Error(), "clip_length = 1099511627776, must be in 1..1024") {
		t.Errorf("CheckSize = %v", err)
	}
}

type checked struct{ ok bool }

func (c checked) Validate() error {
	if !c.ok {
		return errors.New("bad")
	}
	return nil
}

func TestValid(t *testing.T) {
	if c, err := Valid(checked{true}); err != nil || !c.ok {
		t.Errorf("Valid(good) = %v, %v", c, err)
	}
	if c, err := Valid(checked{false}); err == nil || c != (checked{}) {
		t.Errorf("Valid(bad) = %v, %v; want the zero config and the error", c, err)
	}
}
