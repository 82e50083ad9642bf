package family

import (
	"testing"

	"fastvideo/fastvideo/api"
)

// TestKeepsCompanions: under AutoMemory a DiT replica goes with the DiT, and the conditioner (the
// "tokenizer" load, which owns the text encoder) stays unless its encoder loads per call: a streaming
// encoder holds no weights between calls. Explicit policies keep all or nothing.
func TestKeepsCompanions(t *testing.T) {
	decided := func(dit, text api.Residency) []api.ComponentResidency {
		return []api.ComponentResidency{{ComponentSize: api.ComponentSize{Name: CompDiT}, Residency: dit},
			{ComponentSize: api.ComponentSize{Name: CompTextEncoder}, Residency: text}}
	}
	for _, c := range []struct {
		policy            MemoryPolicy
		dit, text         api.Residency
		replica, tokenize bool
		encoder           bool
	}{
		{AutoMemory, api.Kept, api.Streamed, true, true, false},
		{AutoMemory, api.PerCall, api.Kept, false, true, true},
		{AutoMemory, api.Kept, api.PerCall, true, false, false},
		{OneResident, api.Kept, api.Kept, false, false, false},
		{AllResident, api.PerCall, api.PerCall, true, true, true},
	} {
		e := &Engine{Memory: c.policy, Residency: decided(c.dit, c.text)}
		if e.Keeps("dit_replica") != c.replica || e.Keeps("tokenizer") != c.tokenize || e.Keeps(CompTextEncoder) != c.encoder {
			t.Errorf("%s, dit %s, text %s: keeps replica %v, tokenizer %v, text encoder %v; want %v, %v, %v", c.policy, c.dit, c.text,
				e.Keeps("dit_replica"), e.Keeps("tokenizer"), e.Keeps(CompTextEncoder), c.replica, c.tokenize, c.encoder)
		}
	}
}

// TestChooseResidencyRules: components are kept most-costly first while every other one still runs
// beside them; one that cannot run even alone constrains nothing and is reported as not fitting; an
// unknown free memory keeps nothing.
func TestChooseResidencyRules(t *testing.T) {
	sizes := []api.ComponentSize{{Name: "a", Bytes: 50}, {Name: "b", Bytes: 10}, {Name: "c", Bytes: 30, StreamBytes: 2}}
	for _, c := range []struct {
		free int64
		want string
	}{
		{100, "resident resident resident"}, // 90 + 10 headroom
		{99, "resident resident streamed"},
		{71, "resident per_call streamed"}, // a+b+c's 2+10 = 72 > 71, a alone with b beside: 70
		{69, "per_call per_call streamed"}, // a cannot stay beside b (a+b+10 = 70), and b kept would stop a
		{55, "per_call resident resident"}, // a cannot run even alone (60), so it stops nothing
		{-1, "per_call per_call streamed"},
	} {
		got := ChooseResidency(c.free, 10, sizes)
		s := ""
		for i, r := range got {
			if i > 0 {
				s += " "
			}
			s += string(r.Residency)
		}
		if s != c.want {
			t.Errorf("free %d: %s, want %s", c.free, s, c.want)
		}
	}
	if got := ChooseResidency(55, 10, sizes); got[0].Fits || got[0].Residency != api.PerCall || got[1].Residency != api.Kept {
		t.Errorf("a component that cannot run alone: %+v", got)
	}
}
