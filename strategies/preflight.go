package strategies

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/IBM/sarama"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/writers/sqlsink"
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
	stored := map[int32]int64{}
	if cfg.Strategy == StrategyCheckpoint {
		p.Sink = SinkDisplay(cfg.Sink)
		p.Note = "checkpoint mode: the sink is not opened (of a kafka:// sink only the brokers' transaction.max.timeout.ms is read) and positions come from the latest checkpoint in --state-dir at start"
	} else {
		env := newRunEnv(cfg)
		env.client, env.src = client, src
		st := batchStrategies[cfg.Strategy](env)
		closeSink, err := dryRunSink(ctx, cfg, st, &p, &stored)
		if err != nil {
			return Plan{}, err
		}
		defer closeSink()
	}
	if err := dryRunGroup(cfg, client, &p); err != nil {
		return Plan{}, err
	}
	p.Partitions = firstBatch(cfg, src.Partitions(), bounds, stored)
	return p, nil
}

// dryRunSink connects to a micro-batch strategy's sink, writing nothing,
// and reads the job's stored positions into stored; the returned close is
// for once the plan is made. Opening a SQLite file that does not exist
// creates it: a dry run leaves that to the run, and such a sink holds no
// positions.
func dryRunSink(ctx context.Context, cfg Config, st batchStrategy, p *Plan, stored *map[int32]int64) (closeSink func(), err error) {
	closeSink = func() {}
	var newFile bool
	if cfg.Strategy != StrategyIdempotent {
		if newFile, err = newSQLiteFile(cfg.Sink); err != nil {
			return nil, err
		}
	}
	if newFile {
		p.Sink = SinkDisplay(cfg.Sink)
		p.Note = "the SQLite file does not exist yet: run creates it"
	} else {
		if err := st.connect(ctx); err != nil {
			return nil, err
		}
		closeSink = func() { st.close() }
		p.Sink = st.sinkName()
	}
	_, inGroup := st.(*controlStrategy) // the controls' positions are not in the sink
	if newFile && !inGroup {
		return closeSink, nil // no offsets stored yet
	}
	read := st.stored
	if sq, ok := st.(interface {
		storedIfAny(context.Context) (map[int32]int64, error)
	}); ok && !inGroup {
		read = sq.storedIfAny
	}
	if *stored, err = read(ctx); err != nil {
		closeSink()
		return nil, classify(err)
	}
	return closeSink, nil
}

// dryRunGroup lists the group's members, and refuses a group another job
// holds: a run would be the newcomer there, and be refused.
func dryRunGroup(cfg Config, client sarama.Client, p *Plan) error {
	var err error
	if p.Members, err = groupMembers(client, cfg.Group.ID); err != nil {
		return classify(fmt.Errorf("describing consumer group %q: %w", cfg.Group.ID, err))
	}
	if cfg.Strategy == StrategyCheckpoint {
		return nil
	}
	foreign, err := foreignMembers(client, cfg.Group.ID, cfg.Job)
	if err != nil {
		return classify(fmt.Errorf("describing consumer group %q: %w", cfg.Group.ID, err))
	}
	if len(foreign) > 0 {
		return errGroupInUse(cfg, foreign)
	}
	return nil
}

// firstBatch plans each partition's first batch from its stored position,
// or from where a run would start it.
func firstBatch(cfg Config, parts []int32, bounds map[int32]batch.Bounds, stored map[int32]int64) []PartitionPlan {
	var out []PartitionPlan
	for _, part := range parts {
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
		out = append(out, pp)
	}
	return out
}

// newSQLiteFile says whether dsn is a SQLite file that does not exist yet.
// Its directory must exist, or the run could not create it: that is the
// run's error, said at once.
func newSQLiteFile(dsn string) (bool, error) {
	t, err := sqlsink.ParseDSN(dsn)
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
