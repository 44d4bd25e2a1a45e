package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// verify --sql's dead letters: the records the recomputation rejects must
// be exactly the ones the sink holds dead letters for — the same count and
// the same (partition, offset) set. A deleted dead-letter row, one added
// by hand, or a job whose dead letters are another query's all show here.
//
// The rejected offsets are kept as runs of consecutive offsets per
// partition (a query that rejects everything is one run per partition):
// memory grows with the runs, not with the records. The sink's offsets
// are streamed in ascending order per partition and merged with them.

// rejections are the offsets the recomputation rejected.
type rejections struct {
	runs  map[int32][]offsetRun // ascending per partition
	n     int64
	first string // the first rejection's reason
}

// offsetRun is the offsets [from, to).
type offsetRun struct{ from, to int64 }

func (r *rejections) add(p int32, off int64, reason string) {
	if r.runs == nil {
		r.runs = map[int32][]offsetRun{}
	}
	if r.n == 0 {
		r.first = reason
	}
	r.n++
	runs := r.runs[p]
	if n := len(runs); n > 0 && runs[n-1].to == off {
		runs[n-1].to++
		return
	}
	r.runs[p] = append(runs, offsetRun{off, off + 1})
}

// deadLetterShow is how many offsets of each kind a difference names.
const deadLetterShow = 5

// deadLetterMerge compares the sink's dead letters with the rejections.
// sink must be called in ascending (partition, offset) order within the
// job's topic; rows of other topics may come anywhere.
type deadLetterMerge struct {
	exp   *rejections
	topic string
	start map[int32]int64 // each partition's log start: dead letters before it can't be judged

	cur     int32
	started bool
	run     int   // index of the next expected run of cur
	pos     int64 // the next expected offset in runs[run]
	visited map[int32]bool

	held                int64 // dead letters the sink holds for the job
	missing, unexpected int64
	missingAt           []string // the first deadLetterShow, "partition/offset"
	unexpectedAt        []string
	beforeStart         int64 // dead letters of offsets deleted from the log
}

func newDeadLetterMerge(exp *rejections, topic string, start map[int32]int64) *deadLetterMerge {
	return &deadLetterMerge{exp: exp, topic: topic, start: start, visited: map[int32]bool{}}
}

// sink takes one dead letter the sink holds.
func (m *deadLetterMerge) sink(topic string, p int32, off int64) {
	m.held++
	if topic != m.topic {
		m.addUnexpected(fmt.Sprintf("%s/%d/%d", topic, p, off))
		return
	}
	if s, ok := m.start[p]; ok && off < s {
		m.beforeStart++
		return
	}
	if !m.started || p != m.cur {
		if m.started {
			m.rest()
		}
		m.cur, m.started, m.run = p, true, 0
		m.visited[p] = true
		if runs := m.exp.runs[p]; len(runs) > 0 {
			m.pos = runs[0].from
		}
	}
	runs := m.exp.runs[p]
	// Everything expected before off has no dead letter.
	for m.run < len(runs) && m.pos < off {
		end := min(runs[m.run].to, off)
		m.addMissing(p, m.pos, end)
		m.pos = end
		if m.pos == runs[m.run].to {
			m.next(runs)
		}
	}
	if m.run < len(runs) && m.pos == off {
		m.pos++
		if m.pos == runs[m.run].to {
			m.next(runs)
		}
		return
	}
	m.addUnexpected(fmt.Sprintf("%d/%d", p, off))
}

func (m *deadLetterMerge) next(runs []offsetRun) {
	m.run++
	if m.run < len(runs) {
		m.pos = runs[m.run].from
	}
}

// rest counts what is left expected of the current partition as missing.
func (m *deadLetterMerge) rest() {
	runs := m.exp.runs[m.cur]
	for m.run < len(runs) {
		m.addMissing(m.cur, m.pos, runs[m.run].to)
		m.next(runs)
	}
}

// finish counts the rejections the sink held nothing for.
func (m *deadLetterMerge) finish() {
	if m.started {
		m.rest()
	}
	parts := make([]int32, 0, len(m.exp.runs))
	for p := range m.exp.runs {
		if !m.visited[p] {
			parts = append(parts, p)
		}
	}
	slices.Sort(parts)
	for _, p := range parts {
		for _, r := range m.exp.runs[p] {
			m.addMissing(p, r.from, r.to)
		}
	}
}

func (m *deadLetterMerge) addMissing(p int32, from, to int64) {
	if to <= from {
		return
	}
	m.missing += to - from
	for off := from; off < to && len(m.missingAt) < deadLetterShow; off++ {
		m.missingAt = append(m.missingAt, fmt.Sprintf("%d/%d", p, off))
	}
}

func (m *deadLetterMerge) addUnexpected(at string) {
	m.unexpected++
	if len(m.unexpectedAt) < deadLetterShow {
		m.unexpectedAt = append(m.unexpectedAt, at)
	}
}

// problem is the FAIL line's text when the dead letters differ from the
// rejections, "" when they agree.
func (m *deadLetterMerge) problem() string {
	if m.missing == 0 && m.unexpected == 0 {
		return ""
	}
	var parts []string
	if m.missing > 0 {
		parts = append(parts, fmt.Sprintf("%d rejected %s no dead letter in the sink (partition/offset %s)",
			m.missing, plural(m.missing, "record has", "records have"), listed(m.missingAt, m.missing)))
	}
	if m.unexpected > 0 {
		parts = append(parts, fmt.Sprintf("%d dead %s of no record the query rejects (partition/offset %s)",
			m.unexpected, plural(m.unexpected, "letter is", "letters are"), listed(m.unexpectedAt, m.unexpected)))
	}
	return fmt.Sprintf("the sink's dead letters differ from the recomputed rejections (%d rejected, %d dead letters): %s",
		m.exp.n, m.held, strings.Join(parts, "; "))
}

func plural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// listed is the first offsets, with "…" when there are more.
func listed(at []string, n int64) string {
	s := strings.Join(at, ", ")
	if n > int64(len(at)) {
		s += ", … " + strconv.FormatInt(n-int64(len(at)), 10) + " more"
	}
	return s
}
