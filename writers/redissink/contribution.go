package redissink

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/microbatch/microbatch/internal/exact"
	"github.com/microbatch/microbatch/record"
	"github.com/microbatch/microbatch/writers"
)

// Total is one event key's contribution of a range: how many events and
// their amount sum.
type Total struct {
	Key    string
	Events int64
	Amount int64
}

// deadLetterJSON is a dead letter's value in Redis; Payload is base64 in JSON.
type deadLetterJSON struct {
	Reason  string `json:"reason"`
	Payload []byte `json:"payload"`
}

// WriteContribution stores range r's results: per-key totals (repeated keys
// are summed, exactly: a key's sum may pass int64) and dead letters, which
// must lie in r. It replaces the range's contribution, so a fold sees the
// old or the new content, never a mix, and writing a range again (a
// replay) is harmless. Once the range is folded it writes nothing and
// returns nil. Nothing is visible to users until Fold. It is fenced by the
// epoch of r's partition (offsets.ErrFenced). Dead letters of more than a
// few MiB are written in several steps (see Contribution, which also
// takes them in parts).
func (j *Job) WriteContribution(ctx context.Context, epoch int64, r record.Range, totals []Total, dls []record.DeadLetter) error {
	c, err := j.NewContribution(epoch, r)
	if err != nil {
		return err
	}
	return c.Totals(ctx, totals, dls)
}

// Contribution writes one range's contribution in steps, so that its dead
// letters need not fit in memory, or in one request: DeadLetters, as often
// as needed, stages them under the contribution (in mb:{job}:contrib:…:dead,
// in calls of a few MiB), then Totals or Rows writes the results, which
// completes the contribution. The first DeadLetters call drops the range's
// contribution and whatever an earlier attempt staged, so until the last
// call a fold finds no contribution (ErrMissing) rather than a mix; the
// fold moves the staged dead letters with the rest, atomically, and refuses
// a contribution whose staged dead letters are incomplete. Every call is
// fenced and does nothing once the range is folded, as WriteContribution.
// An attempt that fails part-way is redone with a new Contribution, from
// the start. Not safe for concurrent use.
type Contribution struct {
	j      *Job
	epoch  int64
	r      record.Range
	staged int64 // dead letters staged by this writer
	fresh  bool  // this writer's first staging call dropped the old ones
	folded bool  // the range is folded: nothing to write
}

// NewContribution starts writing range r's contribution under epoch (see
// Contribution).
func (j *Job) NewContribution(epoch int64, r record.Range) (*Contribution, error) {
	if err := validateRange(r); err != nil {
		return nil, err
	}
	return &Contribution{j: j, epoch: epoch, r: r}, nil
}

// keys are the contribution scripts' KEYS.
func (c *Contribution) keys() []string {
	k := c.j.keys
	return []string{k.epoch(), k.epochs(), k.offsets(), k.contrib(c.r), k.contribDead(c.r)}
}

// args starts the contribution scripts' ARGV: the writer's epoch and the
// range.
func (c *Contribution) args(capacity int) []any {
	return append(make([]any, 0, capacity), c.epoch, rangeField(c.r), c.r.From, c.r.To)
}

// DeadLetters stages dls, which must lie in the range.
func (c *Contribution) DeadLetters(ctx context.Context, dls []record.DeadLetter) error {
	for len(dls) > 0 && !c.folded {
		args := c.args(5)
		if c.fresh {
			args = append(args, "0")
		} else {
			args = append(args, "1")
		}
		size := 0
		for len(dls) > 0 && size < deadChunkBytes {
			f, v, err := c.encode(&dls[0])
			if err != nil {
				return err
			}
			args = append(args, f, v)
			size += len(v)
			dls = dls[1:]
		}
		n, err := stageDeadScript.Run(ctx, c.j.s.c, c.keys(), args...).Int64()
		if err != nil {
			return fmt.Errorf("writing dead letters of %v for job %s: %w", c.r, c.j.name, scriptError(err))
		}
		c.fresh = true
		if n < 0 {
			c.folded = true
			break
		}
		c.staged += n
	}
	return nil
}

// encode is a dead letter's field and value in the range's hashes.
func (c *Contribution) encode(d *record.DeadLetter) (string, []byte, error) {
	r := c.r
	if d.Topic != r.Topic || d.Partition != r.Partition || d.Offset < r.From || d.Offset >= r.To {
		return "", nil, fmt.Errorf("writers: dead letter %s/%d@%d is outside range %v", d.Topic, d.Partition, d.Offset, r)
	}
	why, payload := d.Reason, d.Payload
	if len(payload) > writers.MaxPayloadBytes {
		why = fmt.Sprintf("%s (payload cut from %d to %d bytes)", why, len(payload), writers.MaxPayloadBytes)
		payload = payload[:writers.MaxPayloadBytes]
	}
	// The reason as every sink stores it (valid UTF-8, bounded).
	v, err := json.Marshal(deadLetterJSON{Reason: writers.StoredReason(why), Payload: payload})
	if err != nil {
		return "", nil, fmt.Errorf("encoding dead letter: %w", err)
	}
	return strconv.FormatInt(d.Offset, 10), v, nil
}

// Totals completes the contribution with per-key totals (repeated keys are
// summed) and the dead letters not staged yet.
func (c *Contribution) Totals(ctx context.Context, totals []Total, dls []record.DeadLetter) error {
	type sum struct{ events, amount exact.Int }
	sums := make(map[string]*sum, len(totals))
	for _, t := range totals {
		s := sums[t.Key]
		if s == nil {
			s = &sum{}
			sums[t.Key] = s
		}
		s.events.Add(t.Events)
		s.amount.Add(t.Amount)
	}
	args := c.args(6 + 2*len(sums))
	args = append(args, "m", rangeMark(c.r))
	for _, k := range slices.Sorted(maps.Keys(sums)) { // a layout that is the same every time
		s := sums[k]
		args = append(args, "t:"+k, s.events.String()+","+s.amount.String())
	}
	return c.finish(ctx, args, dls)
}

// finish writes the contribution: args (the script's ARGV so far) and the
// dead letters, inline if none were staged and they are small, else staged
// first.
func (c *Contribution) finish(ctx context.Context, args []any, dls []record.DeadLetter) error {
	size := 0
	for i := range dls {
		size += len(dls[i].Payload)
	}
	// Base64 and JSON make the payloads a third larger.
	if c.fresh || size > deadChunkBytes/2 {
		if err := c.DeadLetters(ctx, dls); err != nil {
			return err
		}
		dls = nil
	}
	if c.folded {
		return nil
	}
	for i := range dls {
		f, v, err := c.encode(&dls[i])
		if err != nil {
			return err
		}
		args = append(args, "d:"+f, v)
	}
	if c.fresh {
		args = append(args, "n", c.staged)
	}
	if err := writeContribScript.Run(ctx, c.j.s.c, c.keys(), args...).Err(); err != nil {
		return fmt.Errorf("writing contribution of %v for job %s: %w", c.r, c.j.name, scriptError(err))
	}
	return nil
}
