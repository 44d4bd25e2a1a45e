package sqlsink

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/microbatch/microbatch/internal/testutil"
	"github.com/microbatch/microbatch/record"
	"github.com/microbatch/microbatch/writers"
	"github.com/microbatch/microbatch/writers/writertest"
)

// The XA cases run against the real MariaDB/MySQL server (skipped without
// MICROBATCH_TEST_MYSQL). Each uses its own job names, which are also the
// xids' branch qualifiers, and rolls back whatever it leaves prepared.

// xaJob is a job name no other test or run uses, short enough for an XA
// branch qualifier.
func xaJob(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	name := nonJobChars.ReplaceAllString(strings.TrimPrefix(t.Name(), "TestXA"), "_")
	if len(name) > 40 {
		name = name[:40]
	}
	return fmt.Sprintf("xa-%s-%s", name, hex.EncodeToString(b))
}

// openXASink opens the MySQL sink and, when the test ends, rolls back the
// prepared transactions of the jobs it names (on a connection of its own),
// so that a failed test leaves no locks behind.
func openXASink(t *testing.T, jobs ...string) *Writer {
	t.Helper()
	dsn := mysqlDSN(t)
	xaCleanup(t, dsn, jobs...)
	return openSink(t, dsn)
}

// xaCleanup rolls back, when the test ends, what the jobs left prepared.
func xaCleanup(t *testing.T, dsn string, jobs ...string) {
	t.Cleanup(func() {
		w, err := Open(context.Background(), dsn)
		if err != nil {
			t.Errorf("cleaning up: %v", err)
			return
		}
		defer w.Close()
		for _, job := range jobs {
			for _, gtrid := range xaListed(t, w, job) {
				id := xaXID{gtrid: gtrid, bqual: job}
				if _, err := w.DB().ExecContext(context.Background(), "XA ROLLBACK "+id.sql()); err != nil {
					t.Errorf("cleaning up %s: %v", id, err)
				}
			}
		}
	})
}

func newTestXA(t *testing.T, w *Writer, job string, subtask int) *XA {
	t.Helper()
	x, err := NewXA(w, job, subtask)
	if err != nil {
		t.Fatalf("NewXA: %v", err)
	}
	t.Cleanup(func() { x.Close() })
	return x
}

// xaListed returns the gtrids XA RECOVER lists for job, read independently
// of the writer's own parsing.
func xaListed(t *testing.T, w *Writer, job string) []string {
	t.Helper()
	rows, err := w.DB().QueryContext(context.Background(), "XA RECOVER")
	if err != nil {
		t.Fatalf("XA RECOVER: %v", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var format, glen, blen int64
		var data []byte
		if err := rows.Scan(&format, &glen, &blen, &data); err != nil {
			t.Fatal(err)
		}
		if format == 0x6d62 && string(data[glen:]) == job {
			out = append(out, string(data[:glen]))
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

func xaWantListed(t *testing.T, w *Writer, job string, want ...string) {
	t.Helper()
	slices.Sort(want)
	if got := xaListed(t, w, job); !slices.Equal(got, want) {
		t.Fatalf("prepared transactions of %s: %q, want %q", job, got, want)
	}
}

func wantXATotals(t *testing.T, w *Writer, job string, want map[string]total) {
	t.Helper()
	got := readTotals(t, w, job)
	if len(got) != len(want) {
		t.Fatalf("totals of %s: %v, want %v", job, got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("totals of %s: %v, want %v", job, got, want)
		}
	}
}

// xaTxn begins txn, upserts one row per key (events 1, amount 10) and
// pre-commits.
func xaTxn(t *testing.T, x *XA, txn int64, keys ...string) writers.Pending {
	t.Helper()
	xaOpen(t, x, txn, keys...)
	p, err := x.PreCommit(t.Context())
	if err != nil {
		t.Fatalf("PreCommit %d: %v", txn, err)
	}
	return p
}

// xaOpen begins txn and upserts one row per key, leaving it open.
func xaOpen(t *testing.T, x *XA, txn int64, keys ...string) {
	t.Helper()
	if err := x.Begin(t.Context(), txn); err != nil {
		t.Fatalf("Begin %d: %v", txn, err)
	}
	var rows [][]any
	for _, k := range keys {
		rows = append(rows, []any{x.job, k, 1, 10})
	}
	if err := x.Upsert(t.Context(), writers.Totals, rows); err != nil {
		t.Fatalf("Upsert in %d: %v", txn, err)
	}
}

var xaOne = total{1, 10} // one upsert of xaTxn

func TestXANew(t *testing.T) {
	if _, err := NewXA(openSQLite(t), "job", 0); err == nil || !strings.Contains(err.Error(), "two-phase") {
		t.Errorf("NewXA on SQLite: %v, want an error about two-phase commit", err)
	}
	w := openMySQL(t)
	if _, err := NewXA(w, strings.Repeat("j", 65), 0); err == nil || !strings.Contains(err.Error(), "64") {
		t.Errorf("NewXA with a 65-byte job: %v, want an error naming the 64-byte limit", err)
	}
	for _, job := range []string{"", "x"} {
		if _, err := NewXA(w, job, -1); err == nil {
			t.Errorf("NewXA(%q, -1) succeeded", job)
		}
	}
	x, err := NewXA(w, strings.Repeat("j", 64), 2)
	if err != nil {
		t.Fatalf("NewXA with a 64-byte job: %v", err)
	}
	if s := x.String(); !strings.Contains(s, "subtask 2") || strings.Contains(s, "mbpass") {
		t.Errorf("String() = %q", s)
	}
}

func TestXACommit(t *testing.T) {
	job := xaJob(t)
	w := openXASink(t, job)
	x := newTestXA(t, w, job, 0)
	ctx := t.Context()
	twoPhaseOK(t, "Recover", x.Recover(ctx, nil))
	twoPhaseOK(t, "Begin", x.Begin(ctx, 1))
	twoPhaseOK(t, "Upsert", x.Upsert(ctx, writers.Totals, totalsRows(job, "a", 1, 10, "b", 2, 20)))
	twoPhaseOK(t, "DeadLetters", x.DeadLetters(ctx, []record.DeadLetter{{Job: job, Topic: "t", Partition: 3, Offset: 7, Reason: "bad", Payload: []byte("{")}}))
	p, err := x.PreCommit(ctx)
	twoPhaseOK(t, "PreCommit", err)
	if p.Sink != "xa" || p.Subtask != 0 || p.Txn != 1 || p.ID != "mb-1-0" {
		t.Fatalf("Pending = %+v", p)
	}

	// Prepared: durable, but invisible to every other session.
	xaWantListed(t, w, job, "mb-1-0")
	wantXATotals(t, w, job, nil)
	if got := readDeadLetters(t, w, job); len(got) != 0 {
		t.Fatalf("dead letters visible before Commit: %v", got)
	}

	// The Pending goes through the checkpoint as JSON.
	data, err := json.Marshal(p)
	twoPhaseOK(t, "Marshal", err)
	var p2 writers.Pending
	twoPhaseOK(t, "Unmarshal", json.Unmarshal(data, &p2))

	twoPhaseOK(t, "Commit", x.Commit(ctx, p2))
	want := map[string]total{"a": {1, 10}, "b": {2, 20}}
	wantXATotals(t, w, job, want)
	if got := readDeadLetters(t, w, job); len(got) != 1 {
		t.Fatalf("dead letters after Commit: %v", got)
	}
	xaWantListed(t, w, job)

	// Idempotent: again on the same writer, and from another one (as after
	// a restart), with no second increment.
	twoPhaseOK(t, "second Commit", x.Commit(ctx, p))
	twoPhaseOK(t, "Commit from another writer", newTestXA(t, w, job, 0).Commit(ctx, p))
	wantXATotals(t, w, job, want)

	// The slot is free again.
	p4 := xaTxn(t, x, 4, "a")
	twoPhaseOK(t, "Commit 4", x.Commit(ctx, p4))
	wantXATotals(t, w, job, map[string]total{"a": {2, 20}, "b": {2, 20}})

	// Not this writer's: refused, not taken as committed.
	other := p
	other.Subtask = 1
	if err := x.Commit(ctx, other); err == nil || errors.Is(err, writers.ErrTxnLost) {
		t.Fatalf("Commit of another subtask's pending: %v", err)
	}
}

func TestXAAbort(t *testing.T) {
	job := xaJob(t)
	w := openXASink(t, job)
	x := newTestXA(t, w, job, 0)
	ctx := t.Context()

	p := xaTxn(t, x, 1, "a")
	twoPhaseOK(t, "Abort", x.Abort(ctx, p))
	xaWantListed(t, w, job)
	twoPhaseOK(t, "second Abort", x.Abort(ctx, p))
	wantXATotals(t, w, job, nil)

	// The zero Pending abandons the open transaction.
	xaOpen(t, x, 2, "b")
	twoPhaseOK(t, "Abort open", x.Abort(ctx, writers.Pending{}))
	twoPhaseOK(t, "Abort with nothing open", x.Abort(ctx, writers.Pending{}))
	if _, err := x.PreCommit(ctx); err == nil {
		t.Fatal("PreCommit after Abort of the open transaction succeeded")
	}
	wantXATotals(t, w, job, nil)

	// Its slot and connection are usable again.
	p2 := xaTxn(t, x, 2, "c")
	twoPhaseOK(t, "Commit", x.Commit(ctx, p2))
	wantXATotals(t, w, job, map[string]total{"c": xaOne})
	xaWantListed(t, w, job)
}

// TestXARotation: while txn n waits prepared, txn n+1 is open and written
// on another connection; a slot is refused while it still holds a
// transaction.
func TestXARotation(t *testing.T) {
	job := xaJob(t)
	w := openXASink(t, job)
	x := newTestXA(t, w, job, 0)
	ctx := t.Context()

	p1 := xaTxn(t, x, 1, "a")
	p2 := xaTxn(t, x, 2, "b") // written while 1 is prepared
	xaOpen(t, x, 3, "c")      // while 1 and 2 are
	if err := x.Begin(ctx, 4); err == nil {
		t.Fatal("Begin 4 while 3 is open succeeded")
	}
	p3, err := x.PreCommit(ctx)
	twoPhaseOK(t, "PreCommit 3", err)
	xaWantListed(t, w, job, "mb-1-0", "mb-2-0", "mb-3-0")
	wantXATotals(t, w, job, nil)

	if err := x.Begin(ctx, 4); err == nil || !strings.Contains(err.Error(), "prepared transaction 1") {
		t.Fatalf("Begin 4 while 1 (same slot) is prepared: %v", err)
	}
	twoPhaseOK(t, "Commit 1", x.Commit(ctx, p1))
	wantXATotals(t, w, job, map[string]total{"a": xaOne})

	xaOpen(t, x, 4, "d", "a") // slot of 1, free again; "a" was 1's row lock
	twoPhaseOK(t, "Commit 2", x.Commit(ctx, p2))
	p4, err := x.PreCommit(ctx)
	twoPhaseOK(t, "PreCommit 4", err)
	wantXATotals(t, w, job, map[string]total{"a": xaOne, "b": xaOne})
	twoPhaseOK(t, "Commit 3", x.Commit(ctx, p3))
	twoPhaseOK(t, "Commit 4", x.Commit(ctx, p4))
	wantXATotals(t, w, job, map[string]total{"a": {2, 20}, "b": xaOne, "c": xaOne, "d": xaOne})
	xaWantListed(t, w, job)
}

func TestXARecover(t *testing.T) {
	job, otherJob := xaJob(t), xaJob(t)
	w := openXASink(t, job, otherJob)
	ctx := t.Context()

	old := newTestXA(t, w, job, 0)
	p1 := xaTxn(t, old, 1, "a")
	xaTxn(t, old, 2, "b")
	xaOpen(t, old, 3, "c")
	sub1 := newTestXA(t, w, job, 1)
	q1 := xaTxn(t, sub1, 1, "s1")
	oj := newTestXA(t, w, otherJob, 0)
	o1 := xaTxn(t, oj, 1, "o")
	// Gone without finishing anything: prepared transactions stay, the
	// open one is rolled back by the server.
	for _, x := range []*XA{old, sub1, oj} {
		twoPhaseOK(t, "Close", x.Close())
	}
	xaWantListed(t, w, job, "mb-1-0", "mb-1-1", "mb-2-0")

	x := newTestXA(t, w, job, 0)
	if err := x.Recover(ctx, []writers.Pending{q1}); err == nil {
		t.Fatal("Recover with another subtask's pending succeeded")
	}
	twoPhaseOK(t, "Recover", x.Recover(ctx, []writers.Pending{p1}))
	wantXATotals(t, w, job, map[string]total{"a": xaOne})
	xaWantListed(t, w, job, "mb-1-1")                                     // the other subtask's: untouched
	xaWantListed(t, w, otherJob, "mb-1-0")                                // the other job's: untouched
	twoPhaseOK(t, "Recover again", x.Recover(ctx, []writers.Pending{p1})) // p1 committed before: success
	wantXATotals(t, w, job, map[string]total{"a": xaOne})

	// New transactions after Recover, reusing numbers the old writer used.
	p3 := xaTxn(t, x, 3, "c")
	twoPhaseOK(t, "Commit 3", x.Commit(ctx, p3))
	wantXATotals(t, w, job, map[string]total{"a": xaOne, "c": xaOne})

	twoPhaseOK(t, "Recover subtask 1", newTestXA(t, w, job, 1).Recover(ctx, nil))
	xaWantListed(t, w, job)
	wantXATotals(t, w, job, map[string]total{"a": xaOne, "c": xaOne})
	twoPhaseOK(t, "Recover other job", newTestXA(t, w, otherJob, 0).Recover(ctx, []writers.Pending{o1}))
	wantXATotals(t, w, otherJob, map[string]total{"o": xaOne})
	xaWantListed(t, w, otherJob)
}

// TestXARecoverOwn: Recover also finishes what the same writer holds
// (prepared on its slots, or open), e.g. after a failed checkpoint.
func TestXARecoverOwn(t *testing.T) {
	job := xaJob(t)
	w := openXASink(t, job)
	x := newTestXA(t, w, job, 0)
	ctx := t.Context()
	p1 := xaTxn(t, x, 1, "a")
	xaTxn(t, x, 2, "b")
	xaOpen(t, x, 3, "c")
	twoPhaseOK(t, "Recover", x.Recover(ctx, []writers.Pending{p1}))
	wantXATotals(t, w, job, map[string]total{"a": xaOne})
	xaWantListed(t, w, job)
	for txn := int64(2); txn <= 4; txn++ {
		twoPhaseOK(t, "Commit", x.Commit(ctx, xaTxn(t, x, txn, "d")))
	}
	wantXATotals(t, w, job, map[string]total{"a": xaOne, "d": {3, 30}})
}

const xaCrashEnv = "MICROBATCH_TEST_XA_CRASH_JOB"

// TestXACrashChild is the process TestXACrash kills: it prepares txn 1
// and 2, leaves 3 open and SIGKILLs itself.
func TestXACrashChild(t *testing.T) {
	job := os.Getenv(xaCrashEnv)
	if job == "" {
		t.Skip("helper process of TestXACrash")
	}
	w, err := Open(t.Context(), mysqlDSN(t))
	twoPhaseOK(t, "Open", err)
	x, err := NewXA(w, job, 0)
	twoPhaseOK(t, "NewXA", err)
	for txn := int64(1); txn <= 2; txn++ {
		p := xaTxn(t, x, txn, fmt.Sprint("k", txn))
		data, err := json.Marshal(p)
		twoPhaseOK(t, "Marshal", err)
		fmt.Printf("PENDING %s\n", data)
	}
	xaOpen(t, x, 3, "k3")
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	time.Sleep(time.Minute)
}

// TestXACrash: the process that prepared dies by SIGKILL between XA
// PREPARE and XA COMMIT; a new writer commits what the checkpoint kept.
func TestXACrash(t *testing.T) {
	job := xaJob(t)
	w := openXASink(t, job)
	ps := writertest.RunKilledChild(t, "TestXACrashChild", xaCrashEnv+"="+job, testutil.EnvMySQL+"="+mysqlDSN(t))
	if len(ps) != 2 {
		t.Fatalf("child printed %d pendings, want 2", len(ps))
	}
	xaWantListed(t, w, job, "mb-1-0", "mb-2-0") // survived the kill
	wantXATotals(t, w, job, nil)

	x := newTestXA(t, w, job, 0)
	twoPhaseOK(t, "Recover", x.Recover(t.Context(), ps[:1]))
	wantXATotals(t, w, job, map[string]total{"k1": xaOne})
	xaWantListed(t, w, job)
	twoPhaseOK(t, "Commit after Recover", x.Commit(t.Context(), ps[0]))
	wantXATotals(t, w, job, map[string]total{"k1": xaOne})
}

// TestXACommitConnectionLost: a connection lost during or before XA
// COMMIT is a retryable error, and the retry, through a fresh connection,
// commits exactly once.
func TestXACommitConnectionLost(t *testing.T) {
	job := xaJob(t)
	target, err := ParseDSN(mysqlDSN(t))
	twoPhaseOK(t, "ParseDSN", err)
	cfg, err := mysql.ParseDSN(target.DataSource)
	twoPhaseOK(t, "ParseDSN", err)
	proxy := testutil.StartCutProxy(t, cfg.Addr)
	cfg.Addr = proxy.Addr()
	w := openXASink(t, job) // direct, for checking
	wp := openSink(t, cfg.FormatDSN())
	x := newTestXA(t, wp, job, 0)
	ctx := t.Context()

	commitRetrying := func(p writers.Pending) {
		t.Helper()
		for i := 0; ; i++ {
			err := x.Commit(ctx, p)
			if err == nil {
				t.Logf("committed %s after %d retries", p.ID, i)
				return
			}
			t.Logf("retry %d: %v", i, err)
			if !writers.IsRetryable(err) || i == 20 {
				t.Fatalf("Commit retry %d: %v (retryable: %v)", i, err, writers.IsRetryable(err))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	// The reply is lost: the commit happened, the writer can't know.
	p1 := xaTxn(t, x, 1, "a")
	proxy.DropReplies(true)
	err = x.Commit(ctx, p1)
	proxy.DropReplies(false)
	if err == nil || !writers.IsRetryable(err) {
		t.Fatalf("Commit whose reply was lost: %v, want a retryable error", err)
	}
	wantXATotals(t, w, job, map[string]total{"a": xaOne}) // it did commit
	commitRetrying(p1)
	wantXATotals(t, w, job, map[string]total{"a": xaOne})

	// The connection is gone before the commit: nothing happened yet.
	p2 := xaTxn(t, x, 2, "b")
	proxy.CutAll()
	err = x.Commit(ctx, p2)
	if err == nil || !writers.IsRetryable(err) {
		t.Fatalf("Commit on a cut connection: %v, want a retryable error", err)
	}
	wantXATotals(t, w, job, map[string]total{"a": xaOne}) // it did not
	commitRetrying(p2)
	wantXATotals(t, w, job, map[string]total{"a": xaOne, "b": xaOne})

	// Begin on a slot whose connection was cut replaces it.
	p3 := xaTxn(t, x, 3, "c") // slot 0: a new connection, kept after the commit
	twoPhaseOK(t, "Commit 3", x.Commit(ctx, p3))
	proxy.CutAll()
	p6 := xaTxn(t, x, 6, "d") // slot 0 again, its connection cut
	twoPhaseOK(t, "Commit 6", x.Commit(ctx, p6))
	wantXATotals(t, w, job, map[string]total{"a": xaOne, "b": xaOne, "c": xaOne, "d": xaOne})
	xaWantListed(t, w, job)
}

// TestXACommitBusy: XAER_NOTA for a transaction that another live session
// holds prepared is not "already committed": Commit waits, then says
// ErrXABusy, and succeeds once that session is gone.
func TestXACommitBusy(t *testing.T) {
	job := xaJob(t)
	w := openXASink(t, job)
	ctx := t.Context()
	holder := newTestXA(t, w, job, 0)
	p := xaTxn(t, holder, 1, "a")

	x := newTestXA(t, w, job, 0)
	start := time.Now()
	err := x.Commit(ctx, p)
	if !errors.Is(err, ErrXABusy) || !writers.IsRetryable(err) {
		t.Fatalf("Commit of a transaction another session holds: %v, want retryable ErrXABusy", err)
	}
	if d := time.Since(start); d < xaDetachWait {
		t.Errorf("gave up after %v, before xaDetachWait %v", d, xaDetachWait)
	}
	wantXATotals(t, w, job, nil)
	xaWantListed(t, w, job, "mb-1-0")

	twoPhaseOK(t, "closing the holder", holder.Close())
	// The server detaches the closed session's branch on its own time (on
	// a loaded machine, past xaDetachWait): ErrXABusy is retryable, and
	// the strategies retry it; so does this test, for a bounded time.
	err = x.Commit(ctx, p)
	for deadline := time.Now().Add(30 * time.Second); errors.Is(err, ErrXABusy) && time.Now().Before(deadline); {
		err = x.Commit(ctx, p)
	}
	twoPhaseOK(t, "Commit after the holder closed", err)
	wantXATotals(t, w, job, map[string]total{"a": xaOne})
}

func TestXACloseTwiceNoLeaks(t *testing.T) {
	job := xaJob(t)
	xaCleanup(t, mysqlDSN(t), job)
	ctx := t.Context()
	w, err := Open(ctx, mysqlDSN(t))
	twoPhaseOK(t, "Open", err)
	defer w.Close()
	x, err := NewXA(w, job, 0)
	twoPhaseOK(t, "NewXA", err)
	twoPhaseOK(t, "Recover", x.Recover(ctx, nil))
	p1 := xaTxn(t, x, 1, "a")
	xaOpen(t, x, 2, "b")
	twoPhaseOK(t, "Close", x.Close())
	twoPhaseOK(t, "second Close", x.Close())
	if err := x.Begin(ctx, 3); err == nil {
		t.Error("Begin after Close succeeded")
	}
	if err := x.Commit(ctx, p1); err == nil {
		t.Error("Commit after Close succeeded")
	}
	// The prepared transaction outlived Close; the open one did not.
	xaWantListed(t, w, job, "mb-1-0")
	x2, err := NewXA(w, job, 0)
	twoPhaseOK(t, "NewXA", err)
	twoPhaseOK(t, "Recover", x2.Recover(ctx, []writers.Pending{p1}))
	twoPhaseOK(t, "Close", x2.Close())
	wantXATotals(t, w, job, map[string]total{"a": xaOne})

	twoPhaseOK(t, "closing the sink", w.Close())
	if leaked := testutil.LeakedGoroutines(5 * time.Second); leaked != "" {
		t.Fatalf("goroutines left after Close:\n%s", leaked)
	}
}

// TestXAServerKill: a prepared transaction survives a session the server
// kills, as one the client closes.
func TestXAServerKill(t *testing.T) {
	job := xaJob(t)
	w := openXASink(t, job)
	x := newTestXA(t, w, job, 0)
	ctx := t.Context()
	p := xaTxn(t, x, 1, "a")
	var conn int64
	twoPhaseOK(t, "CONNECTION_ID", x.slot(1).conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&conn))
	_, err := w.DB().ExecContext(ctx, fmt.Sprintf("KILL %d", conn))
	twoPhaseOK(t, "KILL", err)
	// KILL only signals the session: wait until it is gone.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		var n int
		twoPhaseOK(t, "PROCESSLIST", w.DB().QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?", conn).Scan(&n))
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("session %d still in the process list a minute after KILL", conn)
		}
	}
	err = x.Commit(ctx, p)
	if err == nil || !writers.IsRetryable(err) {
		t.Fatalf("Commit on the killed connection: %v, want a retryable error", err)
	}
	twoPhaseOK(t, "Commit retry", x.Commit(ctx, p))
	wantXATotals(t, w, job, map[string]total{"a": xaOne})
	xaWantListed(t, w, job)
}

// TestXAEmpty: MariaDB rolls back a prepared transaction that changed
// nothing when its session ends; the writer's own row in XATable keeps an
// empty transaction from being one.
func TestXAEmpty(t *testing.T) {
	job := xaJob(t)
	w := openXASink(t, job)
	ctx := t.Context()
	x := newTestXA(t, w, job, 0)
	twoPhaseOK(t, "Begin", x.Begin(ctx, 1))
	p, err := x.PreCommit(ctx)
	twoPhaseOK(t, "PreCommit", err)
	twoPhaseOK(t, "Close", x.Close()) // the session ends
	xaWantListed(t, w, job, "mb-1-0")
	twoPhaseOK(t, "Recover", newTestXA(t, w, job, 0).Recover(ctx, []writers.Pending{p}))
	xaWantListed(t, w, job)
	var last, commits int64
	twoPhaseOK(t, "reading "+XATable, w.DB().QueryRowContext(ctx,
		"SELECT txn, commits FROM mb_xa_txns WHERE job = ? AND subtask = 0 AND slot = 1", job).Scan(&last, &commits))
	if last != 1 || commits != 1 {
		t.Fatalf("%s row: txn %d, commits %d; want 1, 1", XATable, last, commits)
	}
}

// TestXALost: a prepared transaction someone else rolled back is
// ErrTxnLost for Commit and Recover, not "committed before" (the server
// answers XAER_NOTA for both).
func TestXALost(t *testing.T) {
	job := xaJob(t)
	w := openXASink(t, job)
	ctx := t.Context()
	x := newTestXA(t, w, job, 0)
	p1 := xaTxn(t, x, 1, "a")
	twoPhaseOK(t, "Commit 1", x.Commit(ctx, p1))
	p4 := xaTxn(t, x, 4, "b") // same slot: its row says 1 committed
	twoPhaseOK(t, "Close", x.Close())
	// The server lets go of the closed session's prepared branch a moment
	// later: until then the branch is another session's (XAER_NOTA).
	var err error
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		_, err = w.DB().ExecContext(ctx, "XA ROLLBACK "+x.xid(4).sql())
		var me *mysql.MySQLError
		if !errors.As(err, &me) || me.Number != xaerNOTA || time.Now().After(deadline) {
			break
		}
	}
	twoPhaseOK(t, "XA ROLLBACK behind the writer's back", err)

	x2 := newTestXA(t, w, job, 0)
	if err := x2.Commit(ctx, p4); !errors.Is(err, writers.ErrTxnLost) {
		t.Fatalf("Commit of a rolled-back transaction: %v, want ErrTxnLost", err)
	}
	if err := x2.Recover(ctx, []writers.Pending{p4}); !errors.Is(err, writers.ErrTxnLost) {
		t.Fatalf("Recover of a rolled-back transaction: %v, want ErrTxnLost", err)
	}
	twoPhaseOK(t, "Recover of the committed one", x2.Recover(ctx, []writers.Pending{p1}))
	twoPhaseOK(t, "Abort of the rolled-back one", x2.Abort(ctx, p4))
	wantXATotals(t, w, job, map[string]total{"a": xaOne})
}

// TestXAMigrateCollation: an mb_xa_txns made by an older version, with the
// server's case-insensitive default collation, gets the binary one at
// Recover, keeping its rows. While a prepared branch of another subtask
// holds the table, Recover still succeeds and leaves the change to a
// later one: stopping there would keep that branch's own recovery from
// ever running.
func TestXAMigrateCollation(t *testing.T) {
	dsn := testutil.FreshMySQLDatabase(t, mysqlDSN(t))
	job := xaJob(t)
	xaCleanup(t, dsn, job)
	w := openSink(t, dsn)
	ctx := t.Context()
	old := strings.Replace(xaDDL, "COLLATE="+xaCollation, "COLLATE=utf8mb4_general_ci", 1)
	if old == xaDDL {
		t.Fatal("xaDDL does not name its collation")
	}
	twoPhaseOK(t, "creating the old table", execErr(w.DB().ExecContext(ctx, old)))
	twoPhaseOK(t, "a row of the old table", execErr(w.DB().ExecContext(ctx,
		"INSERT INTO mb_xa_txns (job, subtask, slot, txn, commits) VALUES (?, 7, 0, 42, 3)", job)))
	collation := func() string {
		t.Helper()
		var c string
		twoPhaseOK(t, "reading the collation", w.DB().QueryRowContext(ctx, `SELECT TABLE_COLLATION FROM information_schema.TABLES
 WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'mb_xa_txns'`).Scan(&c))
		return c
	}
	if c := collation(); c != "utf8mb4_general_ci" {
		t.Fatalf("old table's collation %s, want utf8mb4_general_ci", c)
	}

	// Subtask 1 holds a prepared branch that wrote its row of the table.
	x1 := newTestXA(t, w, job, 1)
	p := xaTxn(t, x1, 1, "a")
	x0 := newTestXA(t, w, job, 0)
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	twoPhaseOK(t, "Recover of subtask 0 while subtask 1 holds the table", x0.Recover(rctx, nil))
	if c := collation(); c != "utf8mb4_general_ci" {
		t.Fatalf("collation %s while a prepared branch held the table: the ALTER did not wait for it?", c)
	}
	xaWantListed(t, w, job, "mb-1-1")

	twoPhaseOK(t, "Commit of subtask 1", x1.Commit(ctx, p))
	twoPhaseOK(t, "Recover of subtask 0", x0.Recover(ctx, nil))
	if c := collation(); c != xaCollation {
		t.Fatalf("collation after Recover: %s, want %s", c, xaCollation)
	}
	var txn, commits int64
	twoPhaseOK(t, "reading the old row", w.DB().QueryRowContext(ctx,
		"SELECT txn, commits FROM mb_xa_txns WHERE job = ? AND subtask = 7 AND slot = 0", job).Scan(&txn, &commits))
	if txn != 42 || commits != 3 {
		t.Fatalf("old row after the migration: txn %d, commits %d; want 42, 3", txn, commits)
	}
	wantXATotals(t, w, job, map[string]total{"a": xaOne})
	// The branch's own row: found by its binary job name, committed.
	if ok, err := x1.committed(ctx, 1); err != nil || !ok {
		t.Fatalf("subtask 1's row after the migration says committed=%v (%v), want true", ok, err)
	}
}

func execErr(_ any, err error) error { return err }
