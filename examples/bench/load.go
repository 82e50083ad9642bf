package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"

	"fastvideo/dit/h3"
	"fastvideo/internal/safetensors"
)

// The load benchmark measures how fast a DiT checkpoint goes from disk to the device: it writes a
// released-layout safetensors folder of the H3 DiT with -load-layers joint blocks (release width,
// bf16, random bits) on the machine's disk, reads the file back raw (after asking the kernel to
// drop its page cache, which may be refused), then times h3.Load of the folder; the rates give the
// released checkpoint's load time by its size.
var (
	loadDir    = flag.String("load-dir", "", "load: folder to write the checkpoint in (default: a temporary folder, removed)")
	loadLayers = flag.Int("load-layers", 8, "load: joint blocks in the written checkpoint (the release has 50)")
)

func init() { register("load", benchLoad) }

func benchLoad(b compute.Backend, c common) error {
	dir := *loadDir
	if dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	} else {
		d, err := os.MkdirTemp("", "fastvideo-load-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	cfg := h3.ReleaseConfig()
	cfg.NumLayers = *loadLayers
	t0 := time.Now()
	size, err := writeRandomDiT(dir, cfg, c.Seed)
	if err != nil {
		return err
	}
	gb := float64(size) / 1e9
	fmt.Printf("load: wrote %d blocks, %.2f GB in %.2f s (%.2f GB/s)\n", cfg.NumLayers, gb, time.Since(t0).Seconds(), gb/time.Since(t0).Seconds())
	dropped := dropPageCache()
	t0 = time.Now()
	if err := readAll(filepath.Join(dir, "diffusion_pytorch_model.safetensors")); err != nil {
		return err
	}
	raw := time.Since(t0).Seconds()
	fmt.Printf("load: raw read %.2f s = %.2f GB/s (page cache dropped: %v)\n", raw, gb/raw, dropped)
	dropped = dropPageCache()
	t0 = time.Now()
	m, err := h3.Load(b, dir, h3.Options{DType: dtypes.BFloat16, Attention: c.Attention})
	if err != nil {
		return err
	}
	load := time.Since(t0).Seconds()
	defer m.Close()
	fmt.Printf("load: h3.Load to the device %.2f s = %.2f GB/s (page cache dropped: %v); %.0f%% of the raw read rate\n",
		load, gb/load, dropped, 100*raw/load)
	fullTable, err := h3.Params(h3.ReleaseConfig())
	if err != nil {
		return err
	}
	fullGB := float64(fullTable.Count()*2) / 1e9
	fmt.Printf("load summary: %.2f GB/s raw, %.2f GB/s h3.Load; the released %.1f GB bf16 checkpoint at these rates: %.1f s raw, %.1f s h3.Load\n",
		gb/raw, gb/load, fullGB, fullGB/(gb/raw), fullGB/(gb/load))
	return nil
}

// writeRandomDiT writes config.json and one safetensors file with cfg's released tensor table in
// bf16, streaming random bits (cheap: the values do not matter to a read), and returns its size.
func writeRandomDiT(dir string, cfg h3.Config, seed uint64) (int64, error) {
	raw, err := json.Marshal(cfg)
	if err != nil {
		return 0, err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644); err != nil {
		return 0, err
	}
	table, err := h3.Params(cfg)
	if err != nil {
		return 0, err
	}
	list := make([]safetensors.Tensor, len(table))
	for i, t := range table {
		list[i] = safetensors.Tensor{Name: t.Name, DType: safetensors.BF16, Shape: t.Shape}
	}
	prefix, _, dataBytes, err := safetensors.EncodeHeader(list, nil)
	if err != nil {
		return 0, err
	}
	f, err := os.Create(filepath.Join(dir, "diffusion_pytorch_model.safetensors"))
	if err != nil {
		return 0, err
	}
	w := bufio.NewWriterSize(f, 16<<20)
	if _, err := w.Write(prefix); err != nil {
		f.Close()
		return 0, err
	}
	if err := writeNoise(w, dataBytes, seed); err != nil {
		f.Close()
		return 0, err
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return 0, err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return 0, err
	}
	return int64(len(prefix)) + dataBytes, f.Close()
}

// writeNoise writes n bytes of small bf16 values (exponent kept below 2^1, so no inf or NaN).
func writeNoise(w io.Writer, n int64, seed uint64) error {
	r := rand.New(rand.NewPCG(seed, 0x6c6f6164))
	buf := make([]byte, 4<<20)
	for i := 0; i < len(buf); i += 2 {
		binary.LittleEndian.PutUint16(buf[i:], uint16(0x3c00|r.IntN(0x0400))^uint16(r.IntN(2))<<15)
	}
	for n > 0 {
		k := min(n, int64(len(buf)))
		if _, err := w.Write(buf[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

func readAll(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.CopyBuffer(io.Discard, f, make([]byte, 16<<20))
	return err
}

// dropPageCache asks the kernel to drop clean cached pages (root only; sandboxes may refuse).
func dropPageCache() bool {
	return os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0o200) == nil
}
