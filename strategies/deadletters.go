package strategies

import (
	"bufio"
	"encoding/gob"
	"fmt"
	"io"
	"os"

	"github.com/microbatch/microbatch/record"
	"github.com/microbatch/microbatch/strategies/internal/shared"
)

// Dead letters with bounded memory.
//
// A batch may hold any number of bad records of up to the broker's message
// size each, so no strategy keeps a batch's dead letters in memory: a task
// holds at most deadLetterSpillBytes of payload, and what goes past it is
// written ahead where it stays atomic with the batch:
//
//   - txn inserts them into the partition's transaction, opened early for
//     that (dlBuffer with a spill into the sqlsink.Tx);
//   - idempotent stages them in Redis under the range's contribution, which
//     the fold moves with the totals (redissink.Contribution);
//   - single, the controls and the XA sink write later than they read (one
//     transaction for all partitions after every task, the offset commit
//     first for at-most-once, the XA branch only at the barrier), so they
//     spool them to an unlinked temp file (dlSpool) and stream it into the
//     write in slices, as often as a retried write needs.

// deadLetterSpillBytes bounds the dead-letter payload a task holds in
// memory; past it they are written ahead (dlBuffer) or spooled (dlSpool).
const deadLetterSpillBytes = 8 << 20

// dlBuffer holds dead letters until deadLetterSpillBytes of payload, then
// hands them to spill and starts again. Flush hands over the rest.
type dlBuffer struct {
	dls   []record.DeadLetter
	bytes int
	spill func([]record.DeadLetter) error
}

func (b *dlBuffer) add(dl record.DeadLetter) error {
	b.dls = append(b.dls, dl)
	b.bytes += shared.DeadLetterSize(&dl)
	if b.bytes < deadLetterSpillBytes {
		return nil
	}
	return b.flush()
}

// flush spills what the buffer holds, if anything.
func (b *dlBuffer) flush() error {
	if len(b.dls) == 0 {
		return nil
	}
	if err := b.spill(b.dls); err != nil {
		return err
	}
	b.reset()
	return nil
}

// reset drops what the buffer holds (an attempt that will be read again).
func (b *dlBuffer) reset() {
	clear(b.dls) // let the payloads go
	b.dls, b.bytes = b.dls[:0], 0
}

// dlSpool keeps a task's dead letters for a write that happens after the
// reading: the latest up to deadLetterSpillBytes in memory, everything
// before them in a temp file, which is unlinked at once where the system
// allows it (nothing is left behind by a crash). each replays them in
// order. Not safe for concurrent use; close it when done.
type dlSpool struct {
	mem dlBuffer

	f    *os.File
	name string // to remove at close where it could not be unlinked at once
	w    *bufio.Writer
	enc  *gob.Encoder
	n    int // dead letters in the file
}

func newDLSpool() *dlSpool {
	s := &dlSpool{}
	s.mem.spill = s.toFile
	return s
}

func (s *dlSpool) add(dl record.DeadLetter) error { return s.mem.add(dl) }

// len is how many dead letters the spool holds.
func (s *dlSpool) len() int { return s.n + len(s.mem.dls) }

func (s *dlSpool) toFile(dls []record.DeadLetter) error {
	if s.f == nil {
		f, err := os.CreateTemp("", "microbatch-dead-letters-*")
		if err != nil {
			return fmt.Errorf("spooling dead letters: %w", err)
		}
		s.f = f
		if os.Remove(f.Name()) != nil {
			s.name = f.Name()
		}
	}
	if s.enc == nil {
		// A gob stream starts with its types: one encoder per file content.
		s.w = bufio.NewWriterSize(s.f, 1<<20)
		s.enc = gob.NewEncoder(s.w)
	}
	for i := range dls {
		if err := s.enc.Encode(&dls[i]); err != nil {
			return fmt.Errorf("spooling dead letters: %w", err)
		}
	}
	s.n += len(dls)
	return nil
}

// each calls fn with the dead letters in the order they were added, in
// slices of at most deadLetterSpillBytes of payload (or one dead letter).
// fn must not keep the slice. It may be called again (a retried write).
func (s *dlSpool) each(fn func([]record.DeadLetter) error) error {
	if s.n > 0 {
		if err := s.w.Flush(); err != nil {
			return fmt.Errorf("spooling dead letters: %w", err)
		}
		end, err := s.f.Seek(0, io.SeekCurrent)
		if err != nil {
			return fmt.Errorf("reading spooled dead letters: %w", err)
		}
		dec := gob.NewDecoder(bufio.NewReaderSize(io.NewSectionReader(s.f, 0, end), 1<<20))
		out := dlBuffer{spill: fn}
		for range s.n {
			var d record.DeadLetter
			if err := dec.Decode(&d); err != nil {
				return fmt.Errorf("reading spooled dead letters: %w", err)
			}
			if err := out.add(d); err != nil {
				return err
			}
		}
		if err := out.flush(); err != nil {
			return err
		}
	}
	if len(s.mem.dls) == 0 {
		return nil
	}
	return fn(s.mem.dls)
}

// reset empties the spool for another attempt at reading.
func (s *dlSpool) reset() error {
	s.mem.reset()
	if s.n == 0 {
		return nil
	}
	s.n, s.enc = 0, nil
	if err := s.f.Truncate(0); err != nil {
		return fmt.Errorf("spooling dead letters: %w", err)
	}
	if _, err := s.f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("spooling dead letters: %w", err)
	}
	return nil
}

// close frees the spool's memory and file. Safe to call twice, and on nil.
func (s *dlSpool) close() {
	if s == nil {
		return
	}
	s.mem.reset()
	s.n, s.enc, s.w = 0, nil, nil
	if s.f != nil {
		// Nothing more to do if these fail: the file holds nothing needed.
		_ = s.f.Close()
		if s.name != "" {
			_ = os.Remove(s.name)
		}
		s.f, s.name = nil, ""
	}
}
