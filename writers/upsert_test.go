package writers

import (
	"encoding/json"
	"errors"
	"testing"
)

func TestUpsertMerges(t *testing.T) {
	u := Upsert{Table: "t", Keys: []string{"k"}, Values: []string{"n", "s", "lo", "hi", "last"},
		Merges: []Merge{MergeAdd, MergeAdd, MergeMin, MergeMax, MergeReplace}}
	if err := u.Validate(); err != nil {
		t.Fatal(err)
	}
	for i, want := range u.Merges {
		if got := u.MergeOf(i); got != want {
			t.Errorf("MergeOf(%d) = %v, want %v", i, got, want)
		}
	}
	whole := Upsert{Table: "t", Keys: []string{"k"}, Values: []string{"a", "b"}, Merge: MergeReplace}
	if whole.MergeOf(1) != MergeReplace {
		t.Errorf("MergeOf without Merges = %v", whole.MergeOf(1))
	}
	for name, bad := range map[string]Upsert{
		"short":        {Table: "t", Keys: []string{"k"}, Values: []string{"a", "b"}, Merges: []Merge{MergeAdd}},
		"empty":        {Table: "t", Keys: []string{"k"}, Values: []string{"a"}, Merges: []Merge{}},
		"unknown":      {Table: "t", Keys: []string{"k"}, Values: []string{"a"}, Merges: []Merge{MergeMaxBytes + 1}},
		"bytes as one": {Table: "t", Keys: []string{"k"}, Values: []string{"a"}, Merge: MergeMinBytes},
		"negative":     {Table: "t", Keys: []string{"k"}, Values: []string{"a"}, Merges: []Merge{-1}},
		"min as one":   {Table: "t", Keys: []string{"k"}, Values: []string{"a"}, Merge: MergeMin},
		"max as one":   {Table: "t", Keys: []string{"k"}, Values: []string{"a"}, Merge: MergeMax},
		"unknown one":  {Table: "t", Keys: []string{"k"}, Values: []string{"a"}, Merge: 7},
	} {
		if err := bad.Validate(); !errors.Is(err, ErrBadMerge) {
			t.Errorf("%s: Validate = %v, want ErrBadMerge", name, err)
		}
	}
}

// An Upsert without Merges encodes as it did before Merges existed (the
// write-ahead sink keeps Upserts in checkpoints); one with them keeps them.
func TestUpsertJSON(t *testing.T) {
	b, err := json.Marshal(Totals)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"Table":"mb_totals","Keys":["job","k"],"Values":["events","amount"],"Merge":0}`; string(b) != want {
		t.Fatalf("Totals encodes as %s, want %s", b, want)
	}
	u := Upsert{Table: "t", Keys: []string{"k"}, Values: []string{"a", "b"}, Merges: []Merge{MergeMin, MergeMax}}
	b, _ = json.Marshal(u)
	var back Upsert
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Merges) != 2 || back.Merges[0] != MergeMin || back.Merges[1] != MergeMax {
		t.Fatalf("Merges after a JSON round trip: %v (from %s)", back.Merges, b)
	}
}
