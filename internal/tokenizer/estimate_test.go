package tokenizer

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// The estimate against the real Qwen3 tokenizer's counts (the
// qwen3_tokenizer fixture cases): never above, and within 20% on ASCII text.
func TestEstimateQwenTokens(t *testing.T) {
	data, err := os.ReadFile("testdata/qwen3_tokenizer/cases.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var c struct {
			Text string `json:"text"`
			IDs  []int  `json:"ids"`
		}
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			t.Fatal(err)
		}
		est, real := EstimateQwenTokens(c.Text), len(c.IDs)
		ascii := true
		for _, r := range c.Text {
			ascii = ascii && r < 128
		}
		if est > real || (ascii && float64(est) < 0.8*float64(real)) {
			t.Errorf("EstimateQwenTokens(%q) = %d, tokenizer %d", c.Text, est, real)
		}
		n++
	}
	if n == 0 || EstimateQwenTokens("") != 0 {
		t.Fatal("no cases")
	}
}
