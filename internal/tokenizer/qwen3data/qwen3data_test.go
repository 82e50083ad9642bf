package qwen3data

import "testing"

// The embedded file is the real Qwen3 tokenizer: its vocabulary and a known
// encoding (the tokenizer package's qwen3 cases).
func TestLoad(t *testing.T) {
	tok, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if n := tok.VocabSize(); n != 151669 {
		t.Fatalf("vocab size %d, want 151669", n)
	}
	got := tok.Encode("Hello, my dog is cute")
	want := []int{9707, 11, 847, 5562, 374, 18838}
	if len(got) != len(want) {
		t.Fatalf("ids %v, want %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("ids %v, want %v", got, want)
		}
	}
	if again, err := Load(); err != nil || again != tok {
		t.Fatalf("second Load: %v, %v", again, err)
	}
}
