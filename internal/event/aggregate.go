package event

// Total is one key's contribution: how many events and the sum of amount.
type Total struct {
	Key    string
	Events int64
	Amount int64
}

// Aggregator sums events per key. The zero value is not usable; use
// NewAggregator. Adding an event whose key was seen before does not
// allocate: keys are looked up by their bytes and copied only when new.
type Aggregator struct {
	index  map[string]int
	totals []Total
}

// NewAggregator returns an empty aggregator.
func NewAggregator() *Aggregator {
	return &Aggregator{index: make(map[string]int)}
}

// Add counts one event.
func (a *Aggregator) Add(ev *Event) {
	i, ok := a.index[string(ev.Key)] // no allocation for the lookup
	if !ok {
		i = len(a.totals)
		k := string(ev.Key)
		a.index[k] = i
		a.totals = append(a.totals, Total{Key: k})
	}
	t := &a.totals[i]
	t.Events++
	t.Amount += ev.Amount
}

// Totals returns the per-key sums in first-seen order. The slice is owned
// by the aggregator until Reset.
func (a *Aggregator) Totals() []Total { return a.totals }

// Len is the number of distinct keys.
func (a *Aggregator) Len() int { return len(a.totals) }

// Reset empties the aggregator, keeping its memory.
func (a *Aggregator) Reset() {
	clear(a.index)
	a.totals = a.totals[:0]
}

// AddTotal merges a sum computed elsewhere (another partition's) into t's
// key.
func (a *Aggregator) AddTotal(t Total) {
	i, ok := a.index[t.Key]
	if !ok {
		i = len(a.totals)
		a.index[t.Key] = i
		a.totals = append(a.totals, Total{Key: t.Key})
	}
	a.totals[i].Events += t.Events
	a.totals[i].Amount += t.Amount
}
