// Package graphexectest checks a model's Prepare methods for its tests: that Prepare compiles ahead
// the programs a later call would otherwise compile on the device's critical path, and that it
// refuses what the call would refuse. It lives beside graphexec, not in internal/testutil, because
// graphexec's own tests import testutil.
package graphexectest

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"fastvideo/internal/graphexec"
)

// Prepared runs prepare and then call, failing t unless prepare compiled programs (exactly want of
// them, or at least one when want is 0) and call compiled none after it; it returns call's result.
func Prepared[T any](t testing.TB, want int64, prepare func() error, call func() T) T {
	t.Helper()
	p0, _ := graphexec.Compiles()
	if err := prepare(); err != nil {
		t.Fatal(err)
	}
	p1, _ := graphexec.Compiles()
	switch {
	case want == 0 && p1 == p0:
		t.Fatal("Prepare compiled no program")
	case want > 0 && p1-p0 != want:
		t.Fatalf("Prepare compiled %d programs, want %d", p1-p0, want)
	}
	got := call()
	if p2, _ := graphexec.Compiles(); p2 != p1 {
		t.Errorf("the call after Prepare compiled %d program(s)", p2-p1)
	}
	return got
}

// PreparedSame checks Prepared on a model from open and that its call gives, bit for bit, what call
// gives on another model from open that compiles as it goes: Prepare must change when programs
// compile, never the numbers.
func PreparedSame[M, T any](t testing.TB, want int64, open func() M, prepare func(M) error, call func(M) T) {
	t.Helper()
	fresh := call(open())
	m := open()
	if got := Prepared(t, want, func() error { return prepare(m) }, func() T { return call(m) }); !reflect.DeepEqual(got, fresh) {
		t.Error("the output after Prepare differs from the one without")
	}
}

// PrepareErrors checks a Prepare(ctx, shape) method: it refuses the shape bad with an error that
// contains want, returns context.Canceled for a cancelled context, and fails once close has run.
func PrepareErrors(t testing.TB, prepare func(context.Context, []int) error, close func() error, shape, bad []int, want string) {
	t.Helper()
	if err := prepare(context.Background(), bad); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Prepare(%v) = %v, want an error containing %q", bad, err, want)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := prepare(ctx, shape); err != context.Canceled {
		t.Errorf("Prepare with a cancelled context = %v, want context.Canceled", err)
	}
	if err := close(); err != nil {
		t.Fatal(err)
	}
	if err := prepare(context.Background(), shape); err == nil {
		t.Error("Prepare after Close succeeded")
	}
}
