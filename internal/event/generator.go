package event

import (
	"math/rand/v2"
	"strconv"
)

// Generator produces the deterministic event sequence of a seed: event i
// always has the same id, key and amount, so a run's expected totals are
// known without reading the sink. Only ts (the production time) varies.
type Generator struct {
	rng  *rand.Rand
	keys []string
	next int64
}

// NewGenerator returns a generator of events over nkeys keys ("k0"…).
func NewGenerator(seed uint64, nkeys int) *Generator {
	if nkeys < 1 {
		nkeys = 1
	}
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	return &Generator{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), keys: keys}
}

// Next returns the next event's id, key and amount (1..1000).
func (g *Generator) Next() (id int64, key string, amount int64) {
	id = g.next
	g.next++
	key = g.keys[g.rng.IntN(len(g.keys))]
	amount = 1 + g.rng.Int64N(1000)
	return id, key, amount
}

// Expected is what a sink must hold after consuming count events of a seed
// exactly once.
type Expected struct {
	Events int64
	Amount int64
}

// ExpectedTotals computes the totals of the first count events of a seed
// without producing them.
func ExpectedTotals(seed uint64, nkeys int, count int64) Expected {
	g := NewGenerator(seed, nkeys)
	var e Expected
	for range count {
		_, _, amount := g.Next()
		e.Events++
		e.Amount += amount
	}
	return e
}
