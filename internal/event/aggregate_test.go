package event

import (
	"math"
	"math/big"
	"testing"
)

// sumsByKey adds up each key's Totals exactly, as a sink does.
func sumsByKey(ts []Total) (events map[string]int64, amounts map[string]*big.Int) {
	events, amounts = map[string]int64{}, map[string]*big.Int{}
	for _, t := range ts {
		if amounts[t.Key] == nil {
			amounts[t.Key] = new(big.Int)
		}
		events[t.Key] += t.Events
		amounts[t.Key].Add(amounts[t.Key], big.NewInt(t.Amount))
	}
	return events, amounts
}

// TestAggregatorCarriesPastInt64: one batch whose events at the amount
// bound take a key's sum past 2^63-1 (and another's past -2^63): the sum
// must not wrap; the key's Totals add up to it exactly.
func TestAggregatorCarriesPastInt64(t *testing.T) {
	const n = math.MaxInt64/MaxAbsAmount + 5 // 9,223,377 events: past int64 at the bound
	a := NewAggregator()
	pos, neg, small := &Event{Key: []byte("p")}, &Event{Key: []byte("n")}, &Event{Key: []byte("s"), Amount: 3}
	pos.Amount, neg.Amount = MaxAbsAmount, -MaxAbsAmount
	for range n {
		a.Add(pos)
		a.Add(neg)
		a.Add(small)
	}
	events, amounts := sumsByKey(a.Totals())
	bound := big.NewInt(MaxAbsAmount)
	want := map[string]*big.Int{
		"p": new(big.Int).Mul(bound, big.NewInt(n)),
		"n": new(big.Int).Mul(bound, big.NewInt(-n)),
		"s": big.NewInt(3 * n),
	}
	for k, w := range want {
		if events[k] != n || amounts[k].Cmp(w) != 0 {
			t.Errorf("key %s: %d events, amount %s; want %d and %s", k, events[k], amounts[k], n, w)
		}
	}
	if want["p"].IsInt64() || want["n"].IsInt64() {
		t.Fatal("the sums stay inside int64: the test proves nothing")
	}
	if a.Len() != 5 {
		t.Errorf("%d Totals, want 5 (p and n carried once each)", a.Len())
	}
}

// TestAggregatorAddTotalCarries: merging partitions' sums (the single
// strategy, a checkpoint interval's outputs) carries as Add does.
func TestAggregatorAddTotalCarries(t *testing.T) {
	a := NewAggregator()
	parts := []Total{
		{"k", 10, math.MaxInt64 - 1}, {"k", 5, math.MaxInt64}, {"k", 1, -7}, {"k", 2, math.MaxInt64},
		{"m", 1, math.MinInt64}, {"m", 1, -1}, {"m", 1, math.MaxInt64}, {"m", 1, math.MaxInt64},
	}
	want := map[string]*big.Int{"k": new(big.Int), "m": new(big.Int)}
	wantEvents := map[string]int64{}
	for _, p := range parts {
		a.AddTotal(p)
		want[p.Key].Add(want[p.Key], big.NewInt(p.Amount))
		wantEvents[p.Key] += p.Events
	}
	events, amounts := sumsByKey(a.Totals())
	for k, w := range want {
		if events[k] != wantEvents[k] || amounts[k].Cmp(w) != 0 {
			t.Errorf("key %s: %d events, amount %s; want %d and %s", k, events[k], amounts[k], wantEvents[k], w)
		}
	}
}
