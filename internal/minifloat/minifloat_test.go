package minifloat

import (
	"math"
	"testing"
)

// TestE4M3FNRoundTrip decodes all 256 codes and encodes every value back: the two NaN codes decode
// to NaN and encode to themselves, every other code is its own round trip.
func TestE4M3FNRoundTrip(t *testing.T) {
	for c := 0; c < 256; c++ {
		b := uint8(c)
		v := DecodeE4M3FN(b)
		if b&0x7f == 0x7f {
			if !math.IsNaN(float64(v)) {
				t.Fatalf("code %#02x decodes to %g, want NaN", b, v)
			}
		} else if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatalf("code %#02x decodes to %g", b, v)
		}
		if got := EncodeE4M3FN(v); got != b {
			t.Fatalf("code %#02x -> %g -> %#02x", b, v, got)
		}
	}
}

// TestE4M3FNValues pins the format's landmarks, computed from the definition by hand.
func TestE4M3FNValues(t *testing.T) {
	for _, c := range []struct {
		code uint8
		want float32
	}{
		{0x00, 0}, {0x01, 1.0 / 512}, {0x07, 7.0 / 512}, {0x08, 1.0 / 64}, {0x38, 1}, {0x39, 1.125},
		{0x7e, 448}, {0xfe, -448}, {0xb8, -1}, {0x81, -1.0 / 512}, {0x40, 2}, {0x30, 0.5},
	} {
		if got := DecodeE4M3FN(c.code); got != c.want {
			t.Errorf("DecodeE4M3FN(%#02x) = %g, want %g", c.code, got, c.want)
		}
	}
	if b := DecodeE4M3FN(0x80); b != 0 || !math.Signbit(float64(b)) {
		t.Errorf("0x80 decodes to %g, want -0", b)
	}
}

// TestE4M3FNRounding checks round to nearest even between every pair of neighbours (the midpoint
// goes to the even code, a hair either side to the nearer one) and the non-saturating overflow.
func TestE4M3FNRounding(t *testing.T) {
	for c := uint8(0); c < 0x7e; c++ {
		lo, hi := DecodeE4M3FN(c), DecodeE4M3FN(c+1)
		mid := (lo + hi) / 2 // exact in float32: both are on a grid far coarser than float32's
		even := c
		if c&1 == 1 {
			even = c + 1
		}
		if got := EncodeE4M3FN(mid); got != even {
			t.Fatalf("midpoint %g of %#02x/%#02x -> %#02x, want %#02x", mid, c, c+1, got, even)
		}
		if got := EncodeE4M3FN(math.Nextafter32(mid, 0)); got != c {
			t.Fatalf("just below %g -> %#02x, want %#02x", mid, got, c)
		}
		if got := EncodeE4M3FN(math.Nextafter32(mid, 1000)); got != c+1 {
			t.Fatalf("just above %g -> %#02x, want %#02x", mid, got, c+1)
		}
		if got := EncodeE4M3FN(-mid); got != even|0x80 {
			t.Fatalf("-%g -> %#02x, want %#02x", mid, got, even|0x80)
		}
	}
	if got := EncodeE4M3FN(464); got != 0x7e {
		t.Errorf("EncodeE4M3FN(464) = %#02x, want 0x7e (the tie goes to 448's even code)", got)
	}
	for _, x := range []float32{470, 480, 1e6, float32(math.Inf(1)), float32(math.NaN())} {
		if got := EncodeE4M3FN(x); got != 0x7f {
			t.Errorf("EncodeE4M3FN(%g) = %#02x, want NaN 0x7f", x, got)
		}
	}
	if got := EncodeE4M3FN(1e-9); got != 0 {
		t.Errorf("EncodeE4M3FN(1e-9) = %#02x, want 0", got)
	}
}

func TestE2M1AndE8M0(t *testing.T) {
	want := []float32{0, 0.5, 1, 1.5, 2, 3, 4, 6, 0, -0.5, -1, -1.5, -2, -3, -4, -6}
	for n, w := range want {
		if got := DecodeE2M1(uint8(n)); got != w {
			t.Errorf("DecodeE2M1(%d) = %g, want %g", n, got, w)
		}
	}
	for b, w := range map[uint8]float32{127: 1, 128: 2, 126: 0.5, 0: float32(math.Ldexp(1, -127)), 254: float32(math.Ldexp(1, 127))} {
		if got := DecodeE8M0(b); got != w {
			t.Errorf("DecodeE8M0(%d) = %g, want %g", b, got, w)
		}
	}
	if !math.IsNaN(float64(DecodeE8M0(0xff))) {
		t.Error("DecodeE8M0(0xff) is not NaN")
	}
}

func TestE4M3FNSaturating(t *testing.T) {
	for x, want := range map[float32]uint8{448: 0x7e, 500: 0x7e, -1e9: 0xfe, float32(math.Inf(-1)): 0xfe, 1: 0x38, 447: EncodeE4M3FN(447)} {
		if got := EncodeE4M3FNSaturating(x); got != want {
			t.Errorf("EncodeE4M3FNSaturating(%g) = %#02x, want %#02x", x, got, want)
		}
	}
}
