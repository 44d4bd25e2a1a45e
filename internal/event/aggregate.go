package event

// Total is one key's contribution: how many events and the sum of amount
// (all of it, or one part of a sum past int64: see Aggregator).
type Total struct {
	Key    string
	Events int64
	Amount int64
}

// Aggregator sums events per key. The zero value is not usable; use
// NewAggregator. Adding an event whose key was seen before does not
// allocate: keys are looked up by their bytes and copied only when new.
//
// Sums never wrap. A key's sum that would leave int64 is carried into a
// new Total of the same key, so a key may have several Totals, each an
// int64, that together hold its exact sum: the sinks add them all (SQL
// upserts of several rows of one key in one statement add each row;
// MySQL keeps mb_totals.amount as DECIMAL, SQLite and Redis as exact
// decimal text beyond int64). The check costs one predictable branch per
// event.
type Aggregator struct {
	index  map[string]int // key -> its last Total, the one that takes adds
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
	s := t.Amount + ev.Amount
	if (t.Amount^s)&(ev.Amount^s) < 0 { // both operands have the sign s lacks: it wrapped
		a.carry(Total{Key: t.Key, Events: 1, Amount: ev.Amount})
		return
	}
	t.Events++
	t.Amount = s
}

// carry starts a new Total for t.Key with t, taking the key's later adds.
func (a *Aggregator) carry(t Total) {
	a.index[t.Key] = len(a.totals)
	a.totals = append(a.totals, t)
}

// Totals returns the per-key sums in first-seen order; a key whose sum
// left int64 has several (see Aggregator). The slice is owned by the
// aggregator until Reset.
func (a *Aggregator) Totals() []Total { return a.totals }

// Len is the number of Totals: the distinct keys, plus one per carry.
func (a *Aggregator) Len() int { return len(a.totals) }

// Reset empties the aggregator, keeping its memory.
func (a *Aggregator) Reset() {
	clear(a.index)
	a.totals = a.totals[:0]
}

// AddTotal merges a sum computed elsewhere (another partition's) into t's
// key, carrying as Add does. Events are counts of records read, far from
// int64's limit, and are not checked.
func (a *Aggregator) AddTotal(t Total) {
	i, ok := a.index[t.Key]
	if !ok {
		i = len(a.totals)
		a.index[t.Key] = i
		a.totals = append(a.totals, Total{Key: t.Key})
	}
	cur := &a.totals[i]
	s := cur.Amount + t.Amount
	if (cur.Amount^s)&(t.Amount^s) < 0 {
		a.carry(t)
		return
	}
	cur.Events += t.Events
	cur.Amount = s
}
