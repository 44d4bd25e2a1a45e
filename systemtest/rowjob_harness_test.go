package systemtest

// A row job's input: the SQL jobs' records (json.dumps spacing, bad
// records among them), and, for copying, what aggregates don't show:
// records repeated byte for byte (two equal records must be two rows), and
// for upserts Kafka keys, each in the partition of its hash as a default
// producer puts it, and tombstones that delete keys.

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/IBM/sarama"

	"github.com/microbatch/microbatch/internal/sinktest"
	"github.com/microbatch/microbatch/strategies"
)

const (
	// rowRepeatEvery: a record in this many (bad ones too) repeats the
	// one before it, key and value, byte for byte.
	rowRepeatEvery = 7
	// rowTombstoneEvery: with keys, a record in this many is a tombstone
	// (a null value) of a random key.
	rowTombstoneEvery = 11
	// rowPlainKeys: with keys, the keys besides sqlKeys: enough that some
	// keys end on a tombstone, and most keep a few updates.
	rowPlainKeys = 150
	// rowNullEvery: with noNullBad (Redis), a good record in this many has
	// no kind: a NULL value, stored as no field in the kind hash (it
	// stopped the job before).
	rowNullEvery = 13
)

// rowQuery is a row job's statement and the table the test creates for
// it first (%[1]s in ddl is the table; "": the job creates its own, or
// Redis).
type rowQuery struct {
	sqlQuery
	ddl string
}

// The MariaDB tables declare the customer's id NOT NULL, so that a record
// without one is a dead letter as in the aggregate jobs (in a row job a
// missing field is NULL); a record's qty is a number, its price a
// DECIMAL(12,9) and a lone surrogate in the customer's id bad JSON text:
// exactly the SQL jobs' bad records are rejected.
var (
	// rowAudit selects the record's partition and offset: every row is
	// distinct, a repeated record too.
	rowAudit = rowQuery{sqlQuery{"audit", "INSERT INTO %[1]s SELECT _partition AS p, _offset AS o, customer->>'$.id' AS user_id, kind, qty, price, ts, " +
		"tags FROM `%[2]s` WHERE kind <> 'return'"},
		"CREATE TABLE %[1]s (id BIGINT AUTO_INCREMENT PRIMARY KEY, p INT NOT NULL, o BIGINT NOT NULL, user_id VARBINARY(1024) NOT NULL, " +
			"kind VARCHAR(16) NOT NULL, qty BIGINT NOT NULL, price DECIMAL(12,9) NOT NULL, ts VARCHAR(64), tags TEXT)"}
	// rowPlain selects no record field: equal records are equal rows, and
	// so are many different ones; the table is a multiset.
	rowPlain = rowQuery{sqlQuery{"plain", "INSERT INTO %[1]s SELECT customer->>'$.id' AS user_id, kind, qty, price FROM `%[2]s` WHERE qty > 0"},
		"CREATE TABLE %[1]s (user_id VARBINARY(1024) NOT NULL, kind VARCHAR(16) NOT NULL, qty INT NOT NULL, price DECIMAL(12,9) NOT NULL)"}
	rowPlainSQLite = rowQuery{rowPlain.sqlQuery,
		"CREATE TABLE %[1]s (user_id TEXT NOT NULL, kind TEXT NOT NULL, qty INTEGER NOT NULL, price TEXT NOT NULL)"}
	// rowUpsert keeps each key's latest record; its offset tells a stale
	// row from the latest.
	rowUpsert = rowQuery{sqlQuery{"upsert", "REPLACE INTO %[1]s (PRIMARY KEY (k)) SELECT _key AS k, _partition AS p, _offset AS o, " +
		"customer->>'$.id' AS user_id, kind, qty, price FROM `%[2]s`"},
		"CREATE TABLE %[1]s (k VARBINARY(255) PRIMARY KEY, p INT NOT NULL, o BIGINT NOT NULL, user_id VARBINARY(1024) NOT NULL, " +
			"kind VARCHAR(16) NOT NULL, qty BIGINT NOT NULL, price DECIMAL(12,9) NOT NULL)"}
	// The PostgreSQL tables of rowAudit and rowUpsert, NOT NULL as
	// MariaDB's (BYTEA for VARBINARY, NUMERIC for DECIMAL).
	rowAuditPG = rowQuery{rowAudit.sqlQuery,
		"CREATE TABLE %[1]s (id BIGSERIAL PRIMARY KEY, p INT NOT NULL, o BIGINT NOT NULL, user_id BYTEA NOT NULL, " +
			"kind VARCHAR(16) NOT NULL, qty BIGINT NOT NULL, price NUMERIC(12,9) NOT NULL, ts VARCHAR(64), tags TEXT)"}
	rowUpsertPG = rowQuery{rowUpsert.sqlQuery,
		"CREATE TABLE %[1]s (k BYTEA PRIMARY KEY, p INT NOT NULL, o BIGINT NOT NULL, user_id BYTEA NOT NULL, " +
			"kind VARCHAR(16) NOT NULL, qty BIGINT NOT NULL, price NUMERIC(12,9) NOT NULL)"}
	// rowUpsertRedis: Redis has no table; its casts reject the bad
	// records (rowMessages gives it no record without a customer's id).
	rowUpsertRedis = rowQuery{sqlQuery{"upsert", "REPLACE INTO %[1]s (PRIMARY KEY (k)) SELECT _key AS k, _offset AS o, " +
		"customer->>'$.id' AS user_id, kind, CAST(qty AS SIGNED) AS qty, CAST(price AS DECIMAL(12,9)) AS price FROM `%[2]s`"}, ""}
)

// rowKey is the key of keyed record i's pick n: one of sqlKeys (keys only
// bytes tell apart) or a plain one.
func rowKey(n int) []byte {
	if n < len(sqlKeys) {
		return []byte(sqlKeys[n])
	}
	return fmt.Appendf(nil, "k%03d", n-len(sqlKeys))
}

// rowInput makes a row job's records (sqlInput.msg): the SQL jobs'
// records, every rowRepeatEvery-th a repeat of the one before; with
// keyed, each with a random key in its hash's partition, every
// rowTombstoneEvery-th a tombstone. noNullBad (Redis, which has no NOT
// NULL column) replaces the bad record without a customer's id (a NULL,
// which only a NOT NULL column rejects) with one whose qty is 1.5, which
// CAST(qty AS SIGNED) rejects, and makes every rowNullEvery-th good
// record one without a kind (a NULL it keeps as no field).
type rowInput struct {
	t                *testing.T
	in               *sqlInput
	keyed, noNullBad bool
	hash             sarama.Partitioner
	last             *sarama.ProducerMessage
	lastBad          bool
	// rowed: with keyed, each key's latest accepted record is a row
	// (true) or a tombstone (false); keys with no row yet are not in it.
	rowed map[string]bool
}

func newRowInput(t *testing.T, in *sqlInput, keyed, noNullBad bool) *rowInput {
	ri := &rowInput{t: t, in: in, keyed: keyed, noNullBad: noNullBad, hash: sarama.NewHashPartitioner(in.topic), rowed: map[string]bool{}}
	in.msg = ri.msg
	return ri
}

func (ri *rowInput) msg(i int64) *sarama.ProducerMessage {
	in := ri.in
	m := &sarama.ProducerMessage{Topic: in.topic}
	bad := i%sqlBadEvery == sqlBadEvery-1
	var key []byte
	switch {
	case !bad && ri.last != nil && i%rowRepeatEvery == rowRepeatEvery-1:
		m.Key, m.Value = ri.last.Key, ri.last.Value
		bad = ri.lastBad
		if bad {
			in.bad++
		}
	case ri.keyed && !bad && i%rowTombstoneEvery == rowTombstoneEvery-1:
		key = rowKey(in.rng.IntN(len(sqlKeys) + rowPlainKeys))
	default:
		v := in.record(i)
		if ri.noNullBad && bad && (i/sqlBadEvery)%4 == 2 {
			v = fmt.Appendf(nil, `{"id": %d, "kind": "buy", "qty": 1.5, "amount": 3, "price": 2.5, "ts": 1796119200000, "customer": {"id": "a"}, "key": "a"}`, i)
		}
		if ri.noNullBad && !bad && i%rowNullEvery == rowNullEvery-1 {
			v = fmt.Appendf(nil, `{"id": %d, "qty": 2, "amount": 3, "price": 2.5, "ts": 1796119200000, "customer": {"id": "n"}, "key": "a"}`, i)
		}
		m.Value = sarama.ByteEncoder(v)
		if ri.keyed {
			key = rowKey(in.rng.IntN(len(sqlKeys) + rowPlainKeys))
		}
	}
	if key != nil {
		m.Key = sarama.ByteEncoder(key)
	}
	ri.last, ri.lastBad = m, bad
	m.Partition = int32(i % crashPartitions)
	if !ri.keyed {
		return m
	}
	k, err := m.Key.Encode()
	if err != nil {
		ri.t.Fatal(err)
	}
	if _, seen := ri.rowed[string(k)]; !bad && (m.Value != nil || seen) {
		ri.rowed[string(k)] = m.Value != nil
	}
	if m.Partition, err = ri.hash.Partition(m, crashPartitions); err != nil {
		ri.t.Fatal(err)
	}
	return m
}

// keys counts the keys whose latest accepted record is a row, and those
// whose latest is a tombstone.
func (ri *rowInput) keys() (rows, deleted int) {
	for _, r := range ri.rowed {
		if r {
			rows++
		} else {
			deleted++
		}
	}
	return rows, deleted
}

// newRowCrashJob is a SQL crash job of a row query: its input from
// rowMessages, its table (if the query has one) created in sink first.
func newRowCrashJob(t *testing.T, strategy strategies.Strategy, brokers, sink string, q rowQuery, seed uint64, keyed bool) (*sqlCrashJob, *rowInput) {
	j := newSQLCrashJob(t, strategy, brokers, sink, q.sqlQuery, seed)
	ri := newRowInput(t, j.in, keyed, q.ddl == "")
	if q.ddl != "" {
		w := sinktest.OpenSQL(t, sink)
		if _, err := w.DB().ExecContext(t.Context(), fmt.Sprintf(q.ddl, "t_"+q.name)); err != nil {
			t.Fatalf("creating the job's table: %v", err)
		}
		w.Close()
	}
	return j, ri
}

var verifyRowsRecomputedRE = regexp.MustCompile(`rows recomputed\s+(\d+)\s+\(one per key\)`)

// requireKeys fails the test unless an upsert's verify --sql recomputed
// one row per key whose latest accepted record is a row, as produced,
// and some keys ended on a tombstone (deletes were tested).
func (ri *rowInput) requireKeys(v sqlVerdict) {
	t := ri.t
	rows, deleted := ri.keys()
	m := verifyRowsRecomputedRE.FindStringSubmatch(v.Stdout)
	if m == nil {
		t.Fatalf("verify --sql printed no rows recomputed (one per key):\n%s", v.Result)
	}
	if n, _ := strconv.Atoi(m[1]); n != rows {
		t.Errorf("verify --sql recomputed %d rows; the input has %d keys whose latest accepted record is a row", n, rows)
	}
	if deleted == 0 {
		t.Errorf("no key's latest record is a tombstone (%d keys): the deletes went untested", rows)
	}
	t.Logf("keys: %d with a row, %d deleted by a tombstone", rows, deleted)
}

// requireRowsControl fails the test unless verify --sql of a control run
// failed the way its strategy fails: at-least-once with duplicates (rows
// extra) and nothing missing, at-most-once with records lost (rows
// missing) and nothing extra.
func requireRowsControl(t *testing.T, v sqlVerdict, atLeastOnce bool, logDir string) {
	t.Helper()
	if v.Code == 0 {
		t.Fatalf("the control came out clean: the crash missed its window (logs in %s)\n%s", logDir, v.Result)
	}
	if v.Code != 1 || v.different != 0 || !strings.Contains(v.Stdout, "FAIL: ") {
		t.Errorf("verify --sql: want exit 1, FAIL and no row different\n%s", v.Result)
	}
	if atLeastOnce && (v.extra == 0 || v.missing != 0) {
		t.Errorf("at-least-once: want rows extra (duplicates), none missing\n%s", v.Result)
	}
	if !atLeastOnce && (v.missing == 0 || v.extra != 0) {
		t.Errorf("at-most-once: want rows missing, none extra\n%s", v.Result)
	}
}
