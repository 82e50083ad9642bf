package h3video

import "fmt"

// Clip-parallel video decode (docs/architecture.md, "Tensor parallelism"): the video VAE decodes a clip
// at a time, so N devices can decode N clips at once. Clips go round-robin (clip i to device i mod N):
// consecutive clips, which the stream blends where they overlap, land on different devices and finish
// close together. The frames then re-enter the stream in clip order through a clipOrder.

// clipAssignment lists, for each of devices devices, the clips it decodes in order: clip i goes to
// device i mod devices.
func clipAssignment(clips, devices int) ([][]int, error) {
	if clips < 1 || devices < 1 {
		return nil, fmt.Errorf("h3video: %d clips over %d devices; both must be at least 1", clips, devices)
	}
	out := make([][]int, devices)
	for i := 0; i < clips; i++ {
		out[i%devices] = append(out[i%devices], i)
	}
	return out, nil
}

// clipOrder puts clips that finish in any order back into clip order: Put takes a finished clip and
// returns the clips, in order, that can now enter the stream.
type clipOrder[T any] struct {
	clips   int
	next    int
	pending map[int]T
}

// newClipOrder reorders clips 0..clips-1.
func newClipOrder[T any](clips int) *clipOrder[T] {
	return &clipOrder[T]{clips: clips, pending: map[int]T{}}
}

// Put records clip i and returns the run of clips from the next one due that are now all finished.
func (o *clipOrder[T]) Put(i int, v T) ([]T, error) {
	if i < o.next || i >= o.clips {
		return nil, fmt.Errorf("h3video: clip %d is outside the clips still due [%d, %d)", i, o.next, o.clips)
	}
	if _, dup := o.pending[i]; dup {
		return nil, fmt.Errorf("h3video: clip %d finished twice", i)
	}
	o.pending[i] = v
	var ready []T
	for {
		v, ok := o.pending[o.next]
		if !ok {
			return ready, nil
		}
		delete(o.pending, o.next)
		ready = append(ready, v)
		o.next++
	}
}

// Done reports whether every clip went through, else which one the stream still waits for.
func (o *clipOrder[T]) Done() error {
	if o.next < o.clips {
		return fmt.Errorf("h3video: clip %d of %d never finished (%d held after it)", o.next, o.clips, len(o.pending))
	}
	return nil
}
