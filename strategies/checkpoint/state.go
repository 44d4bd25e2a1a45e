package checkpoint

import (
	"cmp"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"

	"github.com/microbatch/microbatch/internal/exact"
	"github.com/microbatch/microbatch/writers"
)

// jobData is the job's part of a checkpoint (offsets.Checkpoint.Data).
// Its JSON is what every checkpoint on disk holds: keep it byte for byte.
type jobData struct {
	// Subtasks is the highest sink parallelism that may have left
	// transactions behind: recovery cleans up that many subtasks.
	Subtasks int `json:"subtasks"`
	// State is the operators' keyed state. A JSON object key is not
	// byte-exact (encoding/json writes U+FFFD for bytes that are not
	// UTF-8), which is safe because the only keys here are the built-in
	// job's, and event.Decode dead-letters every record whose key is not
	// valid UTF-8; a Transform keeps no keyed state.
	State   keyedState        `json:"state"`
	Pending []writers.Pending `json:"pending"`
}

// keyState is a key's running count and amount total in the operators'
// state. The total is exact (exact.Int): it never wraps. In a checkpoint
// it is [events, amount], two JSON integers, the amount of any size, as
// checkpoints always held it.
type keyState struct {
	Events int64
	Amount exact.Int
}

// keyedState is the operators' state: per key, its running totals.
type keyedState map[string]keyState

func (k keyState) MarshalJSON() ([]byte, error) {
	b := append(strconv.AppendInt([]byte{'['}, k.Events, 10), ',')
	return append(k.Amount.Append(b), ']'), nil
}

func (k *keyState) UnmarshalJSON(b []byte) error {
	var v [2]json.RawMessage
	if err := json.Unmarshal(b, &v); err != nil || v[0] == nil || v[1] == nil {
		return fmt.Errorf("keyed state %s: want [events, amount]", b)
	}
	events, err := strconv.ParseInt(string(v[0]), 10, 64)
	if err != nil {
		return fmt.Errorf("keyed state %s: events: %w", b, err)
	}
	var amount exact.Int
	if err := amount.UnmarshalJSON(v[1]); err != nil {
		return fmt.Errorf("keyed state %s: amount: %w", b, err)
	}
	*k = keyState{Events: events, Amount: amount}
	return nil
}

// add counts one event of amount.
func (k *keyState) add(amount int64) {
	k.Events++
	k.Amount.Add(amount) // exact: int64 while it fits, math/big beyond
}

// keyOwner is the operator instance, of n, that owns key.
func keyOwner(key []byte, n int) int {
	if n == 1 {
		return 0
	}
	h := fnv.New32a()
	h.Write(key)
	return int(h.Sum32() % uint32(n))
}

// share is operator o's part of s (of n operators), split by key owner,
// so that the parallelism may change between runs.
func (s keyedState) share(o, n int) keyedState {
	out := keyedState{}
	for k, v := range s {
		if keyOwner([]byte(k), n) == o {
			out[k] = v
		}
	}
	return out
}

// mergeState folds operator snapshots into one keyed state.
func mergeState(parts []keyedState) keyedState {
	out := keyedState{}
	for _, m := range parts {
		maps.Copy(out, m)
	}
	return out
}

// sortedPending orders pending transactions for a stable checkpoint file.
func sortedPending(ps []writers.Pending) []writers.Pending {
	slices.SortFunc(ps, func(a, b writers.Pending) int {
		return cmp.Or(cmp.Compare(a.Subtask, b.Subtask), cmp.Compare(a.Txn, b.Txn))
	})
	return ps
}
