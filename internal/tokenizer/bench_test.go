package tokenizer

import (
	"slices"
	"testing"
)

// prompt70 is a typical H3 prompt of exactly 70 Qwen3 tokens (ids from HF).
const prompt70 = "(S1) A cheerful street musician in a weathered denim jacket plays an acoustic guitar under golden evening light in a busy Lisbon square, pigeons scattering as tourists gather around her. She smiles and sings <d>[English] Every road leads back to you, my friend.</d> Warm ambient crowd noise, soft reverb, 4K."

var prompt70IDs = []int{3759, 16, 8, 362, 70314, 8592, 38744, 304, 264, 9104, 291, 63805, 26208, 11088, 458, 44066, 16986, 1212, 20748, 11458, 3100, 304, 264, 13028, 80701, 9334, 11, 49355, 2382, 71816, 438, 31653, 9567, 2163, 1059, 13, 2932, 42532, 323, 67241, 366, 67, 30768, 22574, 60, 7209, 5636, 11508, 1182, 311, 498, 11, 847, 4238, 3918, 67, 29, 45763, 34188, 13428, 11980, 11, 8413, 312, 22328, 11, 220, 19, 42, 13}

func BenchmarkEncode70(b *testing.B) {
	tk := loadQwen(b)
	if got := tk.Encode(prompt70); !slices.Equal(got, prompt70IDs) {
		b.Fatalf("Encode = %v, want %v", got, prompt70IDs)
	}
	b.ReportAllocs()
	for b.Loop() {
		tk.Encode(prompt70)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/70, "ns/token")
}

func BenchmarkDecode70(b *testing.B) {
	tk := loadQwen(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tk.Decode(prompt70IDs); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLoadCold is a first load: gunzip, JSON parse, validation, tables.
func BenchmarkLoadCold(b *testing.B) {
	for b.Loop() {
		if _, err := LoadWith(qwenFile, Options{NoCache: true}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLoadWarm reads the compiled cache that a first load wrote.
func BenchmarkLoadWarm(b *testing.B) {
	dir := b.TempDir()
	if _, err := LoadWith(qwenFile, Options{CacheDir: dir}); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		tk, err := LoadWith(qwenFile, Options{CacheDir: dir})
		if err != nil {
			b.Fatal(err)
		}
		if !tk.fromCache {
			b.Fatal("cache not used")
		}
	}
}
