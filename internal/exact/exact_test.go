package exact

import (
	"encoding/json"
	"math"
	"math/big"
	"testing"
)

// TestAddCrossesInt64 adds across both ends of int64 and back, checking
// every step against math/big.
func TestAddCrossesInt64(t *testing.T) {
	steps := []int64{math.MaxInt64 - 5, 3, 3, 1, math.MaxInt64, -math.MaxInt64, -math.MaxInt64, math.MinInt64, math.MinInt64, -1,
		math.MaxInt64, math.MaxInt64, math.MaxInt64, 7, -3}
	var x Int
	want := new(big.Int)
	for i, v := range steps {
		x.Add(v)
		want.Add(want, big.NewInt(v))
		if x.Big().Cmp(want) != 0 || x.String() != want.String() {
			t.Fatalf("step %d (+%d): got %s, want %s", i, v, x, want)
		}
		if n, ok := x.Int64(); ok != want.IsInt64() || (ok && n != want.Int64()) {
			t.Fatalf("step %d: Int64() = %d, %v for %s", i, n, ok, want)
		}
	}
}

// A copy does not change when the original adds (copies share a big.Int).
func TestCopiesAreIndependent(t *testing.T) {
	x := New(math.MaxInt64)
	x.Add(10)
	y := x
	x.Add(5)
	x.AddInt(y)
	if y.String() != "9223372036854775817" {
		t.Fatalf("the copy changed to %s", y)
	}
	if x.String() != "18446744073709551639" {
		t.Fatalf("x = %s", x)
	}
}

func TestParseAndJSON(t *testing.T) {
	for _, s := range []string{"0", "-1", "9223372036854775807", "9223372036854775808", "-9223372036854775809",
		"123456789012345678901234567890123456789"} {
		x, err := Parse(s)
		if err != nil || x.String() != s {
			t.Errorf("Parse(%s) = %s, %v", s, x, err)
		}
		b, err := json.Marshal(struct{ T Int }{x})
		if err != nil || string(b) != `{"T":`+s+`}` {
			t.Errorf("Marshal(%s) = %s, %v", s, b, err)
		}
		var back struct{ T Int }
		if err := json.Unmarshal(b, &back); err != nil || !back.T.Equal(x) {
			t.Errorf("Unmarshal(%s) = %s, %v", b, back.T, err)
		}
	}
	for _, s := range []string{"", "-", "1.5", "1e3", " 1", "1_000", "0x10", "abc", "99999999999999999999x"} {
		if x, err := Parse(s); err == nil {
			t.Errorf("Parse(%q) = %s, want an error", s, x)
		}
	}
	for _, b := range []string{`"12"`, `1.0`, `1e30`, `null`, `+1`} {
		var v struct{ T Int }
		if err := json.Unmarshal([]byte(`{"T":`+b+`}`), &v); err == nil {
			t.Errorf("Unmarshal(%s) = %s, want an error", b, v.T)
		}
	}
}

func TestCmpAndValue(t *testing.T) {
	a, _ := Parse("9223372036854775808")
	b := New(math.MaxInt64)
	if a.Cmp(b) != 1 || b.Cmp(a) != -1 || !a.Equal(FromBig(a.Big())) || New(-2).Cmp(New(3)) != -1 {
		t.Fatal("Cmp is wrong")
	}
	if v, ok := b.Value().(int64); !ok || v != math.MaxInt64 {
		t.Fatalf("Value of an int64 = %v (%T)", b.Value(), b.Value())
	}
	if v, ok := a.Value().(string); !ok || v != "9223372036854775808" {
		t.Fatalf("Value past int64 = %v (%T)", a.Value(), a.Value())
	}
}

// BenchmarkAdd is the hot path: an int64 sum that fits.
func BenchmarkAdd(b *testing.B) {
	var x Int
	b.ReportAllocs()
	for b.Loop() {
		x.Add(3)
	}
}
