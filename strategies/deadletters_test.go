package strategies

import (
	"bytes"
	"fmt"
	"os"
	"testing"

	"github.com/microbatch/microbatch/record"
	"github.com/microbatch/microbatch/strategies/internal/shared"
)

func spoolDL(i int, size int) record.DeadLetter {
	p := bytes.Repeat([]byte{byte('a' + i%26)}, size)
	copy(p, fmt.Sprintf("#%d#", i))
	return record.DeadLetter{Job: "j", Topic: "t", Partition: int32(i % 3), Offset: int64(i), Reason: fmt.Sprintf("reason %d", i), Payload: p}
}

// TestDLSpool: a spool gives back every dead letter, in order, in slices
// bounded by deadLetterSpillBytes, as often as asked; what went past the
// memory part lives in a file nobody else can see; reset starts afresh.
func TestDLSpool(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	const size = 300 << 10 // 2.5 × deadLetterSpillBytes in all
	n := 5 * deadLetterSpillBytes / 2 / size
	s := newDLSpool()
	defer s.close()
	for i := range n {
		if err := s.add(spoolDL(i, size)); err != nil {
			t.Fatal(err)
		}
	}
	if s.len() != n {
		t.Fatalf("len %d, want %d", s.len(), n)
	}
	if s.f == nil {
		t.Fatalf("%d bytes of dead letters and no file: all in memory", n*size)
	}
	if len(s.mem.dls) == n || s.mem.bytes >= deadLetterSpillBytes {
		t.Fatalf("%d dead letters of %d bytes in memory", len(s.mem.dls), s.mem.bytes)
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Errorf("the spool file is visible in TMPDIR (%s): a crash would leave it behind", ents[0].Name())
	}
	for round := range 2 { // a retried write reads it all again
		i := 0
		err := s.each(func(dls []record.DeadLetter) error {
			b := 0
			for _, d := range dls {
				b += shared.DeadLetterSize(&d)
				want := spoolDL(i, size)
				if d.Job != want.Job || d.Topic != want.Topic || d.Partition != want.Partition || d.Offset != want.Offset ||
					d.Reason != want.Reason || !bytes.Equal(d.Payload, want.Payload) {
					t.Fatalf("round %d: dead letter %d came back as %s/%d@%d %q (%.8q…)", round, i, d.Topic, d.Partition, d.Offset, d.Reason, d.Payload)
				}
				i++
			}
			if len(dls) > 1 && b > deadLetterSpillBytes+size {
				t.Errorf("round %d: a slice of %d bytes, want at most %d", round, b, deadLetterSpillBytes+size)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if i != n {
			t.Fatalf("round %d: %d dead letters back, want %d", round, i, n)
		}
	}

	// Another attempt at reading: only what it adds.
	if err := s.reset(); err != nil {
		t.Fatal(err)
	}
	if s.len() != 0 {
		t.Fatalf("len %d after reset", s.len())
	}
	for i := range n {
		if err := s.add(spoolDL(1000+i, size)); err != nil {
			t.Fatal(err)
		}
	}
	i := 0
	if err := s.each(func(dls []record.DeadLetter) error {
		for _, d := range dls {
			if d.Offset != int64(1000+i) || !bytes.Equal(d.Payload, spoolDL(1000+i, size).Payload) {
				t.Fatalf("after reset: dead letter %d came back as offset %d", i, d.Offset)
			}
			i++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if i != n {
		t.Fatalf("after reset: %d dead letters back, want %d", i, n)
	}
	s.close()
	s.close()
	var nilSpool *dlSpool
	nilSpool.close()
}

// TestDLBuffer: the buffer spills once it holds deadLetterSpillBytes and
// flush hands over the rest, in order.
func TestDLBuffer(t *testing.T) {
	var spilled [][]int64
	b := dlBuffer{spill: func(dls []record.DeadLetter) error {
		var offs []int64
		for _, d := range dls {
			offs = append(offs, d.Offset)
		}
		spilled = append(spilled, offs)
		return nil
	}}
	const size = 3 << 20
	for i := range 7 {
		if err := b.add(spoolDL(i, size)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.flush(); err != nil {
		t.Fatal(err)
	}
	if err := b.flush(); err != nil { // nothing left: no call
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(spilled), "[[0 1 2] [3 4 5] [6]]"; got != want {
		t.Errorf("spilled %s, want %s", got, want)
	}
}
