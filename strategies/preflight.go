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
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/strategies/checkpoint"
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
	// Checkpoint is, in checkpoint mode, the newest complete checkpoint a
	// run resumes from (its positions are the partitions' Stored); nil:
	// none, a new job.
	Checkpoint *offsets.Checkpoint
	// StateDir is, in checkpoint mode, where the checkpoints are read
	// ("" with the memory state backend, which keeps none across runs).
	StateDir string
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
		if err := dryRunCheckpointSink(ctx, cfg, &p); err != nil {
			return Plan{}, err
		}
		if err := dryRunCheckpoint(cfg, bounds, &p, stored); err != nil {
			return Plan{}, err
		}
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

// dryRunCheckpointSink reaches checkpoint mode's sink as a run's start-up
// does, writing nothing: a SQL sink is connected to (no table created, no
// transaction of an earlier run committed or aborted: a run's restore
// does that), a file sink's directory looked at; of a kafka:// sink the
// brokers' transaction.max.timeout.ms was read (checkBrokerLimits), its
// topics are left for the run to create.
func dryRunCheckpointSink(ctx context.Context, cfg Config, p *Plan) error {
	p.Sink = SinkDisplay(cfg.Sink)
	spec, err := parseCheckpointSink(cfg.Sink, cfg.Checkpoint.SinkMode)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	switch spec.Kind {
	case checkpoint.SinkXA, checkpoint.SinkPG2PC, checkpoint.SinkWAL:
		newFile, err := newSQLiteFile(spec.DSN)
		if err != nil {
			return err
		}
		if newFile {
			p.Note = "the SQLite file does not exist yet: run creates it"
			return nil
		}
		var w *sqlsink.Writer
		if err := connect(ctx, cfg.ConnectTimeout, func(actx context.Context) (err error) {
			w, err = sqlsink.Open(actx, spec.DSN)
			return err
		}); err != nil {
			return err
		}
		p.Sink = fmt.Sprintf("%s (%s)", w, spec.Kind)
		return w.Close()
	case checkpoint.SinkFile:
		if _, err := os.Stat(spec.Dir); errors.Is(err, fs.ErrNotExist) {
			p.Note = fmt.Sprintf("directory %s does not exist yet: run creates it", spec.Dir)
		} else if err != nil {
			return fmt.Errorf("file sink: %w", err)
		}
	case checkpoint.SinkKafka:
		p.Note = "kafka sink: its topics are created by the run if missing"
	}
	return nil
}

// dryRunCheckpoint reads the newest complete checkpoint of the job, as a
// run's restore does, into stored: where each partition resumes (a
// partition added since starts at its log start). Without one, stored
// stays empty and the plan is a new job's. Nothing is created: a missing
// state dir holds no checkpoint.
func dryRunCheckpoint(cfg Config, bounds map[int32]batch.Bounds, p *Plan, stored map[int32]int64) error {
	if cfg.Checkpoint.StateBackend == StateBackendMemory {
		return nil // no checkpoint survives a run
	}
	p.StateDir = cfg.Checkpoint.StateDir
	if _, err := os.Stat(cfg.Checkpoint.StateDir); errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	store, err := offsets.NewFileCheckpoints(cfg.Checkpoint.StateDir, 0)
	if err != nil {
		return err
	}
	chk, err := store.Latest(context.Background(), cfg.Job)
	if err != nil || chk == nil {
		return err
	}
	if chk.Topic != cfg.Topic {
		return fmt.Errorf("%w: job %q's checkpoint %d is of topic %q, not %q: use another --job or --state-dir", ErrConfig, cfg.Job, chk.ID, chk.Topic, cfg.Topic)
	}
	p.Checkpoint = chk
	for part, b := range bounds {
		next, ok := chk.Offsets[part]
		if !ok {
			next = b.Start
		}
		stored[part] = next
	}
	return nil
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
			if cfg.Strategy == StrategyCheckpoint {
				pp.To = b.End // a stream: no batch bounds its first read
			}
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
