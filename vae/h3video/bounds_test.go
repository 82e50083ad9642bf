package h3video

import (
	"strings"
	"testing"
	"time"
)

// A config from the internet that claims a 2^40-frame clip is refused by the reader; it used to
// pass and then spin in Plan, deaf to Ctrl-C.
func TestHugeClipLengthIsRefused(t *testing.T) {
	c := DefaultConfig()
	c.ClipLength = 1 << 40
	done := make(chan error, 1)
	go func() { done <- c.Validate() }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "clip_length") {
			t.Fatalf("Validate: %v, want a clip_length error", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Validate did not return")
	}
}
