package api

import "fmt"

// Residency is where a heavyweight component's weights are between the calls of a generator.
type Residency string

// ComponentSize is what the memory policy knows of one heavyweight component.
type ComponentSize struct {
	Name string `json:"name"`
	// Bytes are its weights on the device at the run's dtype.
	Bytes int64 `json:"bytes"`
	// StreamBytes, when positive, is what it holds on the device at once when it streams its
	// layers instead of loading them all: it then never needs Bytes.
	StreamBytes int64 `json:"stream_bytes,omitempty"`
}

// RunningBytes is what the component holds on the device while it runs when it is not kept: the
// streamed part when it streams, else all of it.
func (c ComponentSize) RunningBytes() int64 {
	if c.StreamBytes > 0 {
		return c.StreamBytes
	}
	return c.Bytes
}

// ComponentResidency is the memory policy's decision for one component.
type ComponentResidency struct {
	ComponentSize
	Residency Residency `json:"residency"`
	// Fits is false when even this component alone, beside the resident ones and the activation
	// headroom, exceeds what the device can give: the run would fail for memory there, so New refuses
	// it (only the memory policy "auto" decides a false).
	Fits bool `json:"fits"`
}

// MemoryRows writes one plan-table row per component: its bytes and, when decided, where it lives.
func MemoryRows(row func(key, format string, a ...any), rs []ComponentResidency) {
	for _, r := range rs {
		where := string(r.Residency)
		switch {
		case where == "":
			where = "residency decided by the device"
		case r.Residency == Streamed:
			where = fmt.Sprintf("streamed (%.2f GiB at a time)", float64(r.StreamBytes)/(1<<30))
		}
		if !r.Fits {
			where += "; does not fit this device: New refuses it (a smaller dtype, a larger device or an explicit memory policy)"
		}
		row("memory "+r.Name, "%.2f GiB, %s", float64(r.Bytes)/(1<<30), where)
	}
}

const (
	// Kept: loaded by the first call that needs it and kept on the device until Close.
	Kept Residency = "resident"
	// PerCall: loaded by the stage that needs it and released at that stage's end.
	PerCall Residency = "per_call"
	// Streamed: read layer by layer while it runs (the text encoders), never whole on the device.
	Streamed Residency = "streamed"
)
