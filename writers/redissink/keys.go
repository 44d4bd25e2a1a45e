package redissink

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/microbatch/microbatch/record"
)

// The key layout is in the package doc; these functions are its only
// spelling.

// EventsKey is the hash of per-key event counts users read.
func EventsKey(job string) string { return jobKeys{job}.events() }

// AmountKey is the hash of per-key amount sums users read.
func AmountKey(job string) string { return jobKeys{job}.amount() }

// OffsetsKey is the job's positions hash (one field per range); a job
// that never committed has none.
func OffsetsKey(job string) string { return jobKeys{job}.offsets() }

// RowsKey is the hash holding value column column of a user-defined job's
// table (Job.WriteRowsContribution): field = the row's key (RowField),
// value = the column's value.
func RowsKey(job, table, column string) string { return jobKeys{job}.key("rows", table, column) }

// SourceKey is the hash holding a source's position (Sink.CommitSource).
func SourceKey(job, source string) string { return "mb:{" + job + "}:source:" + source }

// jobKeys names the keys of one job.
type jobKeys struct{ job string }

func (k jobKeys) key(parts ...string) string {
	return "mb:{" + k.job + "}:" + strings.Join(parts, ":")
}

func (k jobKeys) events() string    { return k.key("totals", "events") }
func (k jobKeys) amount() string    { return k.key("totals", "amount") }
func (k jobKeys) offsets() string   { return k.key("offsets") }
func (k jobKeys) epoch() string     { return k.key("epoch") }
func (k jobKeys) epochs() string    { return k.key("epochs") }
func (k jobKeys) batch() string     { return k.key("batch") }
func (k jobKeys) planParts() string { return k.key("plan", "parts") }
func (k jobKeys) lastPlan() string  { return k.key("plan", "last") }
func (k jobKeys) plan(id int64) string {
	return k.key("plan", strconv.FormatInt(id, 10))
}

func (k jobKeys) contrib(r record.Range) string {
	return k.key("contrib", r.Topic, strconv.FormatInt(int64(r.Partition), 10),
		strconv.FormatInt(r.From, 10)+"-"+strconv.FormatInt(r.To, 10))
}

// contribDead holds a contribution's staged dead letters.
func (k jobKeys) contribDead(r record.Range) string { return k.contrib(r) + ":dead" }

// dead holds a partition's folded dead letters; part is the partition in
// decimal.
func (k jobKeys) dead(topic, part string) string { return k.key("dead", topic, part) }

func (k jobKeys) deadOf(r record.Range) string {
	return k.dead(r.Topic, strconv.FormatInt(int64(r.Partition), 10))
}

// rangeField is the range's field in mb:{job}:offsets, epochs and
// plan:parts.
func rangeField(r record.Range) string {
	return r.Topic + "/" + strconv.FormatInt(int64(r.Partition), 10)
}

// partField is partition part of topic's field (rangeField).
func partField(topic string, part int32) string {
	return rangeField(record.Range{Topic: topic, Partition: part})
}

// rangeMark is the range as its contribution's "m" field holds it (it marks
// even an empty contribution).
func rangeMark(r record.Range) string {
	return fmt.Sprintf("%s/%d [%d, %d)", r.Topic, r.Partition, r.From, r.To)
}

// checkJob refuses names that would break the hash tag: a "}" would end it
// early and let two jobs' key spaces overlap.
func checkJob(job string) error {
	if job == "" || strings.ContainsAny(job, "{}") {
		return fmt.Errorf("writers: job name %q can't be used in Redis keys (empty, or has { or })", job)
	}
	return nil
}

// checkTopic refuses what is no Kafka topic name.
func checkTopic(topic string) error {
	if !record.ValidTopic(topic) {
		return fmt.Errorf("writers: bad topic name %q", topic)
	}
	return nil
}
