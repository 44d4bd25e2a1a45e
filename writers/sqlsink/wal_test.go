package sqlsink_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/record"
	"github.com/microbatch/microbatch/writers"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

func TestWAL(t *testing.T) {
	ctx := context.Background()
	w, err := sqlsink.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "wal.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.CreateTables(ctx); err != nil {
		t.Fatal(err)
	}
	l := sqlsink.NewWAL(w, "j", 0)
	if err := l.Recover(ctx, nil); err != nil {
		t.Fatal(err)
	}
	totals := func() (events, amount int64) {
		t.Helper()
		if err := w.DB().QueryRow(`SELECT COALESCE(SUM(events),0), COALESCE(SUM(amount),0) FROM mb_totals WHERE job = 'j'`).Scan(&events, &amount); err != nil {
			t.Fatal(err)
		}
		return events, amount
	}
	write := func(txn int64, amount int64) writers.Pending {
		t.Helper()
		if err := l.Begin(ctx, txn); err != nil {
			t.Fatal(err)
		}
		if err := l.Upsert(t.Context(), writers.Totals, [][]any{{"j", "k", int64(1), amount}}); err != nil {
			t.Fatal(err)
		}
		if err := l.DeadLetters(t.Context(), []record.DeadLetter{{Job: "j", Topic: "t", Offset: txn, Reason: "bad", Payload: []byte{0, 1}}}); err != nil {
			t.Fatal(err)
		}
		p, err := l.PreCommit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}

	p1 := write(1, 1<<53+1) // not exact as a float64: JSON must keep it int64
	if e, a := totals(); e != 0 || a != 0 {
		t.Fatalf("before commit: %d/%d visible, want nothing", e, a)
	}
	if err := l.Commit(ctx, p1); err != nil {
		t.Fatal(err)
	}
	if e, a := totals(); e != 1 || a != 1<<53+1 {
		t.Fatalf("after commit: events %d amount %d", e, a)
	}
	// A replay of the same checkpoint (recovery) is detected, not applied.
	if err := l.Recover(ctx, []writers.Pending{p1}); err != nil {
		t.Fatal(err)
	}
	if e, _ := totals(); e != 1 || l.Rewrites() != 1 {
		t.Fatalf("replay: events %d, rewrites %d; want 1 and 1", e, l.Rewrites())
	}
	// An aborted checkpoint writes nothing.
	p2 := write(2, 5)
	if err := l.Abort(ctx, p2); err != nil {
		t.Fatal(err)
	}
	if e, _ := totals(); e != 1 {
		t.Fatalf("after abort: events %d", e)
	}
	p3 := write(3, 7)
	if err := l.Commit(ctx, p3); err != nil {
		t.Fatal(err)
	}
	// A checkpoint older than what the table holds: the job's history is
	// not this table's. Refused, never silently skipped.
	if err := l.Commit(ctx, p2); !errors.Is(err, writers.ErrTxnLost) {
		t.Fatalf("commit of an older checkpoint: %v, want ErrTxnLost", err)
	}
	var dead int
	if err := w.DB().QueryRow(`SELECT COUNT(*) FROM mb_dead_letters WHERE job = 'j'`).Scan(&dead); err != nil || dead != 2 {
		t.Fatalf("dead letters %d (%v), want 2", dead, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestWALKeepsBytes: the checkpoint keeps a WAL's rows as JSON, and
// encoding/json turns every byte of a string that is not UTF-8 into U+FFFD:
// "page-\xff" and "page-\xfe" came back as one key and their rows merged.
// Rows must come back byte for byte — such strings, a real U+FFFD, []byte
// (which plain JSON brings back as base64 text), nil — and stay distinct
// rows; a dead letter's reason that is not UTF-8 is stored escaped.
func TestWALKeepsBytes(t *testing.T) {
	for _, c := range []struct{ name, ddl string }{
		{"sqlite", "CREATE TABLE wal_bytes_%s (k TEXT PRIMARY KEY, v BLOB, n INTEGER NOT NULL)"},
		{"mysql", "CREATE TABLE wal_bytes_%s (k VARBINARY(64) PRIMARY KEY, v VARBINARY(64), n BIGINT NOT NULL)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := t.Context()
			w, table, job := openWALBytesSink(t, c.name, c.ddl)
			l := sqlsink.NewWAL(w, job, 0)
			if err := l.Recover(ctx, nil); err != nil {
				t.Fatal(err)
			}
			u := writers.Upsert{Table: table, Keys: []string{"k"}, Values: []string{"v", "n"}, Merge: writers.MergeReplace}
			rows := [][]any{
				{"page-\xff", []byte{0, 0xff, 0xfe}, int64(1)},
				{"page-\xfe", []byte{}, int64(10)},
				{"page-\uFFFD", []byte(nil), int64(100)},
				{"caf\xc3", []byte("\xc3"), int64(1000)},
				{"plain", []byte("plain"), int64(10000)},
			}
			orig := fmt.Sprintf("%#v", rows)
			if err := l.Begin(ctx, 1); err != nil {
				t.Fatal(err)
			}
			if err := l.Upsert(ctx, u, rows); err != nil {
				t.Fatal(err)
			}
			badReason := "decode: key \"page-\xff\" is " + strings.Repeat("é", 600) // 1218 bytes
			if err := l.DeadLetters(ctx, []record.DeadLetter{{Job: job, Topic: "t", Offset: 1, Reason: badReason, Payload: []byte("page-\xff")}}); err != nil {
				t.Fatal(err)
			}
			p, err := l.PreCommit(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprintf("%#v", rows); got != orig {
				t.Errorf("PreCommit changed the caller's rows:\n%s\nwant\n%s", got, orig)
			}
			// Through the checkpoint's JSON, as recovery reads it.
			var saved writers.Pending
			if b, err := json.Marshal(p); err != nil {
				t.Fatal(err)
			} else if err := json.Unmarshal(b, &saved); err != nil {
				t.Fatal(err)
			}
			if err := sqlsink.NewWAL(w, job, 0).Recover(ctx, []writers.Pending{saved}); err != nil {
				t.Fatal(err)
			}
			wantWALBytesRows(t, w, table, rows)
			wantWALBytesDeadLetter(t, w, job)
		})
	}
}

// openWALBytesSink opens the sink of dialect name with its tables and a
// table of its own made by ddl (%s: a suffix unique per run), and returns
// that table's name and a job name unique per run.
func openWALBytesSink(t *testing.T, name, ddl string) (w *sqlsink.Writer, table, job string) {
	t.Helper()
	ctx := t.Context()
	dsn := "sqlite://" + filepath.Join(t.TempDir(), "wal.db")
	if name == "mysql" {
		dsn = testutil.NeedServer(t, testutil.EnvMySQL)
	}
	w, err := sqlsink.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	if err := w.CreateTables(ctx); err != nil {
		t.Fatal(err)
	}
	suffix := fmt.Sprintf("%d", time.Now().UnixNano())
	table = "wal_bytes_" + suffix
	if _, err := w.DB().ExecContext(ctx, fmt.Sprintf(ddl, suffix)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.DB().Exec("DROP TABLE " + table) })
	return w, table, "wal-bytes-" + suffix
}

// wantWALBytesRows checks that table holds rows (k, v, n) byte for byte,
// each a row of its own, and a nil v as NULL.
func wantWALBytesRows(t *testing.T, w *sqlsink.Writer, table string, rows [][]any) {
	t.Helper()
	type value struct {
		v []byte
		n int64
	}
	want := map[string]value{}
	for _, r := range rows {
		want[r[0].(string)] = value{r[1].([]byte), r[2].(int64)}
	}
	got, err := w.DB().QueryContext(t.Context(), "SELECT k, v, v IS NULL, n FROM "+table)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	n := 0
	for got.Next() {
		var k, v []byte
		var null bool
		var cnt int64
		if err := got.Scan(&k, &v, &null, &cnt); err != nil {
			t.Fatal(err)
		}
		n++
		wv, ok := want[string(k)]
		if !ok {
			t.Errorf("row k=%q (n=%d) was never written", k, cnt)
			continue
		}
		if cnt != wv.n || !bytes.Equal(v, wv.v) || null != (wv.v == nil) {
			t.Errorf("row k=%q: v=%q (NULL %v) n=%d, want v=%q (NULL %v) n=%d", k, v, null, cnt, wv.v, wv.v == nil, wv.n)
		}
	}
	if err := got.Err(); err != nil {
		t.Fatal(err)
	}
	if n != len(rows) {
		t.Errorf("%d rows, want %d distinct ones", n, len(rows))
	}
}

// wantWALBytesDeadLetter checks job's dead letter: its reason escaped to
// UTF-8 and cut to MaxReasonBytes, its payload the record's bytes.
func wantWALBytesDeadLetter(t *testing.T, w *sqlsink.Writer, job string) {
	t.Helper()
	var reason string
	var payload []byte
	if err := w.DB().QueryRowContext(t.Context(), "SELECT reason, payload FROM mb_dead_letters WHERE job = ?", job).Scan(&reason, &payload); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(reason, `decode: key "page-\xff" is éé`) || !utf8.ValidString(reason) || len(reason) > writers.MaxReasonBytes {
		t.Errorf("reason stored as %d bytes %.60q, want the escaped reason cut to %d bytes", len(reason), reason, writers.MaxReasonBytes)
	}
	if string(payload) != "page-\xff" {
		t.Errorf("payload %q, want the record's bytes", payload)
	}
}

// TestWALReadsOldCheckpoints: a checkpoint written before values that are
// not UTF-8 were tagged holds plain JSON values only; it still applies as
// it did (a []byte then came back base64 text, a string).
func TestWALReadsOldCheckpoints(t *testing.T) {
	ctx := t.Context()
	w, err := sqlsink.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "wal.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.CreateTables(ctx); err != nil {
		t.Fatal(err)
	}
	// PreCommit's Data as the previous version wrote it.
	old := `{"upserts":[{"upsert":{"Table":"mb_totals","Keys":["job","k"],"Values":["events","amount"],"Merge":0},` +
		`"rows":[["j","page-\ufffd",1,9007199254740993],["j","b64",2,3]]}],` +
		`"dead_letters":[{"Job":"j","Topic":"t","Partition":0,"Offset":7,"Reason":"bad","Payload":"AAE="}]}`
	l := sqlsink.NewWAL(w, "j", 0)
	if err := l.Recover(ctx, []writers.Pending{{Sink: "wal", Subtask: 0, Txn: 5, ID: "j/0/5", Data: []byte(old)}}); err != nil {
		t.Fatal(err)
	}
	var events, amount int64
	if err := w.DB().QueryRowContext(ctx, "SELECT events, amount FROM mb_totals WHERE job = 'j' AND k = ?", "page-\uFFFD").Scan(&events, &amount); err != nil || events != 1 || amount != 9007199254740993 {
		t.Errorf("old checkpoint's row: events %d amount %d (%v), want 1 and 9007199254740993", events, amount, err)
	}
	var payload []byte
	if err := w.DB().QueryRowContext(ctx, "SELECT payload FROM mb_dead_letters WHERE job = 'j' AND off = 7").Scan(&payload); err != nil || !bytes.Equal(payload, []byte{0, 1}) {
		t.Errorf("old checkpoint's dead letter payload %q (%v), want 00 01", payload, err)
	}
	// An object that is not one of the tagged forms is refused, not guessed.
	bad := `{"upserts":[{"upsert":{"Table":"mb_totals","Keys":["job","k"],"Values":["events","amount"],"Merge":0},"rows":[["j",{"what":"x"},1,2]]}]}`
	if err := l.Commit(ctx, writers.Pending{Sink: "wal", Txn: 6, ID: "j/0/6", Data: []byte(bad)}); err == nil || !strings.Contains(err.Error(), "unreadable") {
		t.Errorf("Commit of an unknown tagged value = %v, want unreadable writes", err)
	}
}
