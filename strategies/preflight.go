package strategies

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/IBM/sarama"

	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/writers"
)

// PartitionPlan is one partition of a dry run: where the job would start
// and what its first batch would read.
type PartitionPlan struct {
	Partition  int32
	Stored     int64 // the sink's (or group's) next offset; -1 if none yet
	Start, End int64 // the log's first offset and last stable offset
	From, To   int64 // the first batch's range; From == To: nothing to read
}

// Plan is what `run --dry-run` reports: the configuration checked, Kafka
// and the sink reached, and what the job would do first.
type Plan struct {
	Strategy   Strategy
	Guarantee  Guarantee
	Topic      string
	Group      string
	Sink       string   // without password
	Members    []string // client ids of the group's live members
	Partitions []PartitionPlan
	Note       string // what the dry run could not check
}

// DryRun validates cfg, connects to Kafka and the sink (waiting up to the
// connect timeout, as a run would), and returns the plan of the first batch.
// It writes nothing: no tables are created, no offsets claimed.
func DryRun(ctx context.Context, cfg Config) (Plan, error) {
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return Plan{}, err
	}
	p := Plan{Strategy: cfg.Strategy, Guarantee: GuaranteeOf(cfg.Strategy), Topic: cfg.Topic, Group: cfg.Group.ID}
	client, src, err := openSource(ctx, cfg)
	if err != nil {
		return Plan{}, err
	}
	defer client.Close()
	defer src.Close()
	if err := checkBrokerLimits(cfg, client); err != nil {
		return Plan{}, err
	}
	bounds, err := src.Bounds(ctx)
	if err != nil {
		return Plan{}, classify(fmt.Errorf("reading offsets of topic %q: %w", cfg.Topic, err))
	}

	// Opening a SQLite file that does not exist creates it: a dry run
	// leaves it to the run.
	var newFile bool
	if cfg.Strategy != StrategyCheckpoint && cfg.Strategy != StrategyIdempotent {
		if newFile, err = newSQLiteFile(cfg.Sink); err != nil {
			return Plan{}, err
		}
		if newFile {
			p.Sink = SinkDisplay(cfg.Sink)
			p.Note = "the SQLite file does not exist yet: run creates it"
		}
	}
	stored := map[int32]int64{}
	switch {
	case cfg.Strategy == StrategyCheckpoint:
		p.Sink = SinkDisplay(cfg.Sink)
		p.Note = "checkpoint mode: the sink is not opened (of a kafka:// sink only the brokers' transaction.max.timeout.ms is read) and positions come from the latest checkpoint in --state-dir at start"
	case cfg.Strategy == StrategyAtLeastOnce || cfg.Strategy == StrategyAtMostOnce:
		if !newFile {
			w, _, err := openSink(ctx, cfg)
			if err != nil {
				return Plan{}, err
			}
			defer w.Close()
			p.Sink = w.String()
		}
		if stored, err = offsets.NewKafkaGroup(client, cfg.Group.ID, cfg.Topic).Load(ctx, src.Partitions()); err != nil {
			return Plan{}, classify(err)
		}
	case newFile: // no offsets stored yet
	default:
		w, rw, err := openSink(ctx, cfg)
		if err != nil {
			return Plan{}, err
		}
		if rw != nil {
			defer rw.Close()
			p.Sink = rw.String()
			if stored, err = rw.Offsets(ctx, cfg.Job, cfg.Topic); err != nil {
				return Plan{}, classify(err)
			}
		} else {
			defer w.Close()
			p.Sink = w.String()
			if stored, err = storedSQL(ctx, w, cfg); err != nil {
				return Plan{}, classify(err)
			}
		}
	}
	if p.Members, err = groupMembers(client, cfg.Group.ID); err != nil {
		return Plan{}, classify(fmt.Errorf("describing consumer group %q: %w", cfg.Group.ID, err))
	}
	if cfg.Strategy != StrategyCheckpoint {
		// A run would be the newcomer in a group another job holds, and
		// be refused.
		foreign, err := foreignMembers(client, cfg.Group.ID, cfg.Job)
		if err != nil {
			return Plan{}, classify(fmt.Errorf("describing consumer group %q: %w", cfg.Group.ID, err))
		}
		if len(foreign) > 0 {
			return Plan{}, errGroupInUse(cfg, foreign)
		}
	}

	for _, part := range src.Partitions() {
		b := bounds[part]
		pp := PartitionPlan{Partition: part, Stored: -1, Start: b.Start, End: b.End}
		from, ok := stored[part]
		if ok {
			pp.Stored = from
		} else if cfg.StartFrom == StartLatest && len(stored) == 0 {
			from = b.End
		} else {
			from = b.Start
		}
		pp.From, pp.To = from, from
		if from >= b.Start && from < b.End {
			pp.To = min(b.End, from+cfg.MaxBatchRecords)
		}
		p.Partitions = append(p.Partitions, pp)
	}
	return p, nil
}

// newSQLiteFile says whether dsn is a SQLite file that does not exist yet.
// Its directory must exist, or the run could not create it: that is the
// run's error, said at once.
func newSQLiteFile(dsn string) (bool, error) {
	t, err := writers.ParseSQLDSN(dsn)
	if err != nil || t.File == "" {
		return false, nil // not SQLite; a bad DSN fails the open as in a run
	}
	if _, err := os.Stat(t.File); !errors.Is(err, fs.ErrNotExist) {
		return false, nil // there (or unreadable: the open says why)
	}
	if st, err := os.Stat(filepath.Dir(t.File)); err != nil || !st.IsDir() {
		return false, fmt.Errorf("connecting to sink %s: directory %s does not exist", t.Display, filepath.Dir(t.File))
	}
	return true, nil
}

// storedSQL reads the job's mb_offsets rows, if the table exists yet.
func storedSQL(ctx context.Context, w *writers.SQL, cfg Config) (map[int32]int64, error) {
	pos, err := offsets.Load(ctx, w.DB(), cfg.Job, cfg.Topic)
	if err != nil {
		msg := err.Error()
		if strings.Contains(msg, "doesn't exist") || strings.Contains(msg, "no such table") {
			return map[int32]int64{}, nil // a sink the job never ran against
		}
		return nil, err
	}
	out := make(map[int32]int64, len(pos))
	for p, v := range pos {
		out[p] = v.NextOffset
	}
	return out, nil
}

// groupMembers lists the client ids of the group's live members.
func groupMembers(client sarama.Client, group string) ([]string, error) {
	members, err := GroupMembers(client, group)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range members {
		out = append(out, m.ClientId)
	}
	sort.Strings(out)
	return out, nil
}
