package batch

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/microbatch/microbatch/record"
)

// planCase is one call of Plan and what it must return.
type planCase struct {
	name       string
	next       map[int32]int64
	bounds     map[int32]Bounds
	maxRecords int64
	want       []record.Range
	wantErr    error  // matched with errors.Is
	errHas     string // substring of the error
}

var planCases = []planCase{
	{
		name:   "no partitions",
		next:   map[int32]int64{},
		bounds: map[int32]Bounds{0: {0, 10}},
	},
	{
		name:   "whole backlog without cap",
		next:   map[int32]int64{0: 0, 1: 5},
		bounds: map[int32]Bounds{0: {0, 10}, 1: {0, 7}},
		want:   []record.Range{{Topic: "t", Partition: 0, From: 0, To: 10}, {Topic: "t", Partition: 1, From: 5, To: 7}},
	},
	{
		name:       "capped by maxRecords",
		next:       map[int32]int64{0: 0, 1: 95, 2: 3},
		bounds:     map[int32]Bounds{0: {0, 1000}, 1: {0, 100}, 2: {0, 13}},
		maxRecords: 10,
		want:       []record.Range{{Topic: "t", Partition: 0, From: 0, To: 10}, {Topic: "t", Partition: 1, From: 95, To: 100}, {Topic: "t", Partition: 2, From: 3, To: 13}},
	},
	{
		name:       "cap of one",
		next:       map[int32]int64{0: 7},
		bounds:     map[int32]Bounds{0: {0, 9}},
		maxRecords: 1,
		want:       []record.Range{{Topic: "t", Partition: 0, From: 7, To: 8}},
	},
	{
		name:       "negative cap means no cap",
		next:       map[int32]int64{0: 0},
		bounds:     map[int32]Bounds{0: {0, 50}},
		maxRecords: -1,
		want:       []record.Range{{Topic: "t", Partition: 0, From: 0, To: 50}},
	},
	{
		name:   "caught-up partitions are skipped",
		next:   map[int32]int64{0: 10, 1: 3, 2: 8},
		bounds: map[int32]Bounds{0: {0, 10}, 1: {0, 4}, 2: {8, 8}},
		want:   []record.Range{{Topic: "t", Partition: 1, From: 3, To: 4}},
	},
	{
		name:   "all caught up",
		next:   map[int32]int64{0: 10, 1: 4},
		bounds: map[int32]Bounds{0: {0, 10}, 1: {4, 4}},
	},
	{
		name:   "sorted by partition whatever the map order",
		next:   map[int32]int64{9: 0, 3: 0, 0: 0, 12: 0, 1: 0, 7: 0},
		bounds: map[int32]Bounds{0: {0, 1}, 1: {0, 1}, 3: {0, 1}, 7: {0, 1}, 9: {0, 1}, 12: {0, 1}},
		want:   []record.Range{{Topic: "t", Partition: 0, From: 0, To: 1}, {Topic: "t", Partition: 1, From: 0, To: 1}, {Topic: "t", Partition: 3, From: 0, To: 1}, {Topic: "t", Partition: 7, From: 0, To: 1}, {Topic: "t", Partition: 9, From: 0, To: 1}, {Topic: "t", Partition: 12, From: 0, To: 1}},
	},
	{
		name:   "next exactly at log start",
		next:   map[int32]int64{0: 5},
		bounds: map[int32]Bounds{0: {5, 8}},
		want:   []record.Range{{Topic: "t", Partition: 0, From: 5, To: 8}},
	},
	{
		name:   "extra bounds for partitions without a position are ignored",
		next:   map[int32]int64{1: 0},
		bounds: map[int32]Bounds{0: {0, 100}, 1: {0, 2}},
		want:   []record.Range{{Topic: "t", Partition: 1, From: 0, To: 2}},
	},
	{
		name:    "data loss: next before log start",
		next:    map[int32]int64{0: 0, 1: 3},
		bounds:  map[int32]Bounds{0: {0, 10}, 1: {5, 10}},
		wantErr: ErrDataLoss,
		errHas:  "t/1",
	},
	{
		name:    "offset ahead: next past the end",
		next:    map[int32]int64{0: 11},
		bounds:  map[int32]Bounds{0: {0, 10}},
		wantErr: ErrOffsetAhead,
		errHas:  "t/0",
	},
	{
		name:   "missing bounds",
		next:   map[int32]int64{0: 0, 4: 0},
		bounds: map[int32]Bounds{0: {0, 10}},
		errHas: "t/4",
	},
}

func TestPlan(t *testing.T) {
	for _, tc := range planCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Plan("t", tc.next, tc.bounds, tc.maxRecords)
			if tc.wantErr != nil || tc.errHas != "" {
				checkPlanError(t, tc, got, err)
				return
			}
			if err != nil {
				t.Fatalf("Plan: %v", err)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("Plan = %v, want %v", got, tc.want)
			}
			// Deterministic: the same inputs give the same ranges.
			for range 5 {
				again, _ := Plan("t", tc.next, tc.bounds, tc.maxRecords)
				if !slices.Equal(again, got) {
					t.Fatalf("Plan is not deterministic: %v then %v", got, again)
				}
			}
		})
	}
}

// checkPlanError: Plan failed as tc says, naming the partition, and
// returned no ranges.
func checkPlanError(t *testing.T, tc planCase, got []record.Range, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("Plan = %v, nil; want an error", got)
	}
	if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
		t.Errorf("Plan error %v is not %v", err, tc.wantErr)
	}
	if !strings.Contains(err.Error(), tc.errHas) {
		t.Errorf("Plan error %q does not name %q", err, tc.errHas)
	}
	if got != nil {
		t.Errorf("Plan returned ranges %v with an error", got)
	}
}

func TestLag(t *testing.T) {
	tests := []struct {
		name   string
		next   map[int32]int64
		bounds map[int32]Bounds
		want   int64
	}{
		{"empty", nil, nil, 0},
		{"one behind", map[int32]int64{0: 3}, map[int32]Bounds{0: {0, 10}}, 7},
		{"sum over partitions", map[int32]int64{0: 3, 1: 0, 2: 5}, map[int32]Bounds{0: {0, 10}, 1: {0, 4}, 2: {0, 5}}, 11},
		{"ahead counts as zero", map[int32]int64{0: 20, 1: 0}, map[int32]Bounds{0: {0, 10}, 1: {0, 1}}, 1},
		{"partition without bounds is ignored", map[int32]int64{0: 0, 1: 0}, map[int32]Bounds{1: {0, 2}}, 2},
		{"bounds without position are ignored", map[int32]int64{1: 0}, map[int32]Bounds{0: {0, 100}, 1: {0, 2}}, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Lag(tc.next, tc.bounds); got != tc.want {
				t.Fatalf("Lag = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestRange(t *testing.T) {
	r := record.Range{Topic: "events", Partition: 3, From: 10, To: 25}
	if r.Len() != 15 {
		t.Errorf("Len = %d, want 15", r.Len())
	}
	if s := r.String(); s != "events/3[10,25)" {
		t.Errorf("String = %q", s)
	}
}
