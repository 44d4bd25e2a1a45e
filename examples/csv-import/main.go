// Command csv-import loads a CSV file of orders into a SQL table exactly
// once, in chunks, and can be killed and restarted at any moment:
//
//	go run ./examples/csv-import -file orders.csv -dsn sqlite://csv-import.db
//
// The file has a header line and then one order per line:
//
//	order_id,customer_id,amount
//	1,c-042,19.99
//
// Each chunk of -chunk lines is summed per customer and added to the
// program's own table (customer_id, orders, amount_cents). The chunk's
// rows, its bad lines (into mb_dead_letters) and the file position the
// chunk ended at (into mb_source_positions) commit in ONE transaction. A
// restart resumes at the stored position, so no line is counted twice or
// skipped, whenever the previous run died.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/record"
	"github.com/microbatch/microbatch/writers"
	"github.com/microbatch/microbatch/writers/sqlsink"
)

func main() {
	dsn := flag.String("dsn", "sqlite://csv-import.db", "SQL database: mysql://user:pass@host:port/db or sqlite://file.db")
	file := flag.String("file", "orders.csv", "CSV file to load")
	job := flag.String("job", "csv-import", "job name: the stored position is per job and file")
	table := flag.String("table", "customer_totals", "table to add the per-customer totals to (created if missing)")
	chunk := flag.Int("chunk", 1000, "lines per transaction")
	pause := flag.Duration("pause", 0, "sleep between chunks (to watch it, or kill it mid-way)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *dsn, *file, *job, *table, *chunk, *pause); err != nil {
		fmt.Fprintln(os.Stderr, "csv-import:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, dsn, file, job, table string, chunkLines int, pause time.Duration) error {
	if chunkLines < 1 {
		return errors.New("-chunk must be at least 1")
	}
	w, err := sqlsink.Open(ctx, dsn)
	if err != nil {
		return err
	}
	defer w.Close()
	// mb_source_positions and mb_dead_letters (and the built-in job's
	// tables, unused here).
	if err := w.CreateTables(ctx); err != nil {
		return err
	}
	// Our own table. This statement works on MySQL/MariaDB and SQLite.
	u := writers.Upsert{Table: table, Keys: []string{"customer_id"}, Values: []string{"orders", "amount_cents"}, Merge: writers.MergeAdd}
	if err := u.Validate(); err != nil {
		return err
	}
	if _, err := w.DB().ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+table+` (
  customer_id VARCHAR(64) NOT NULL PRIMARY KEY,
  orders BIGINT NOT NULL,
  amount_cents BIGINT NOT NULL)`); err != nil {
		return fmt.Errorf("creating %s: %w", table, err)
	}

	// Claim the file: this fences an older run still alive somewhere (its
	// next commit fails with offsets.ErrFenced) and says where to resume.
	source := filepath.Base(file)
	claim, err := w.ClaimSource(ctx, job, source)
	if err != nil {
		return err
	}
	from := claim.Position // "" the first time
	pos, err := parsePosition(from)
	if err != nil {
		return err
	}
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Seek(pos.Offset, io.SeekStart); err != nil {
		return err
	}
	fmt.Printf("resuming %s at byte %d (line %d), epoch %d\n", source, pos.Offset, pos.Line, claim.Epoch)
	r := bufio.NewReaderSize(f, 1<<16)

	for n := claim.Chunks + 1; ; n++ {
		c, err := readChunk(r, pos, chunkLines, job, source)
		if err != nil {
			return err
		}
		if c.lines == 0 {
			fmt.Printf("done: %s loaded up to byte %d (%d lines)\n", source, pos.Offset, pos.Line)
			return nil
		}
		a := offsets.SourceAdvance{Job: job, Source: source, From: from, To: c.end.String(), Epoch: claim.Epoch}
		if err := commitChunk(ctx, w, u, c, a, n == crashInChunk()); err != nil {
			return fmt.Errorf("chunk %d (lines %d-%d): %w", n, pos.Line+1, c.end.Line, err)
		}
		fmt.Printf("chunk %d committed: lines %d-%d, %d customers, %d bad lines, position %s\n",
			n, pos.Line+1, c.end.Line, len(c.rows), len(c.bad), a.To)
		from, pos = a.To, c.end
		if pause > 0 {
			select {
			case <-time.After(pause):
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			fmt.Printf("interrupted: committed up to line %d; run again to go on\n", pos.Line)
			return nil
		}
	}
}

// commitChunk writes a chunk's rows and bad lines and advances the source
// in one transaction. CommitSource retries what allows it (a lost
// connection, a deadlock), counting a commit whose reply was lost as done;
// it fails with offsets.ErrConflict if the file is not at a.From any more
// (this chunk was committed already) and offsets.ErrFenced if a newer run
// claimed the file.
func commitChunk(ctx context.Context, w *sqlsink.Writer, u writers.Upsert, c chunk, a offsets.SourceAdvance, crash bool) error {
	return w.CommitSource(ctx, a, func(tx *sqlsink.Tx) error {
		if err := tx.Upsert(ctx, u, c.rows); err != nil {
			return err
		}
		if err := tx.DeadLetters(ctx, c.bad); err != nil {
			return err
		}
		if crash { // TEST HOOK, see crashInChunk
			fmt.Println("test hook: SIGKILL with the chunk's rows written, not committed")
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
		return nil
	})
}

// crashInChunk reads CSV_IMPORT_CRASH_IN_CHUNK. TEST HOOK, not for
// production: with n > 0, the program SIGKILLs itself inside the
// transaction of chunk n (as numbered in its output), after the chunk's
// rows and dead letters are written and before the commit. examples_test.go uses it to show
// that such a chunk is rolled back and loaded again, once.
func crashInChunk() int64 {
	n, _ := strconv.ParseInt(os.Getenv("CSV_IMPORT_CRASH_IN_CHUNK"), 10, 64)
	return n
}

// position is where a chunk ends: the byte offset to seek to, and the
// number of lines before it (for line numbers in dead letters). It is
// stored as "<offset>:<line>".
type position struct{ Offset, Line int64 }

func (p position) String() string { return fmt.Sprintf("%d:%d", p.Offset, p.Line) }

func parsePosition(s string) (position, error) {
	if s == "" {
		return position{}, nil
	}
	o, l, ok := strings.Cut(s, ":")
	off, err1 := strconv.ParseInt(o, 10, 64)
	line, err2 := strconv.ParseInt(l, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return position{}, fmt.Errorf("stored position %q is not <offset>:<line>", s)
	}
	return position{off, line}, nil
}

type chunk struct {
	lines int
	end   position
	rows  [][]any // customer_id, orders, amount_cents
	bad   []record.DeadLetter
}

// readChunk reads up to n lines from r, which stands at pos, and sums
// them per customer. A line that doesn't parse becomes a dead letter
// (topic = file name, offset = line number).
func readChunk(r *bufio.Reader, pos position, n int, job, source string) (chunk, error) {
	type sum struct{ orders, cents int64 }
	sums := map[string]*sum{}
	c := chunk{end: pos}
	for c.lines < n {
		line, err := r.ReadString('\n') // the last line may lack its newline
		if err != nil && !errors.Is(err, io.EOF) {
			return chunk{}, err
		}
		if line == "" {
			break
		}
		c.lines++
		c.end.Offset += int64(len(line))
		c.end.Line++
		text := strings.TrimRight(line, "\r\n")
		if c.end.Line == 1 && strings.HasPrefix(text, "order_id,") {
			continue // the header
		}
		customer, cents, perr := parseLine(text)
		if perr != nil {
			c.bad = append(c.bad, record.DeadLetter{Job: job, Topic: source, Partition: 0, Offset: c.end.Line,
				Reason: perr.Error(), Payload: []byte(text)})
			continue
		}
		s := sums[customer]
		if s == nil {
			s = &sum{}
			sums[customer] = s
		}
		s.orders++
		s.cents += cents
	}
	// Sorted by key, so that concurrent writers lock rows in one order.
	for _, k := range slices.Sorted(maps.Keys(sums)) {
		c.rows = append(c.rows, []any{k, sums[k].orders, sums[k].cents})
	}
	return c, nil
}

// parseLine parses "order_id,customer_id,amount" with amount in units
// and at most two decimals, returning the amount in cents.
func parseLine(text string) (customer string, cents int64, err error) {
	f := strings.Split(text, ",")
	if len(f) != 3 {
		return "", 0, fmt.Errorf("%d fields, want 3", len(f))
	}
	if _, err := strconv.ParseInt(f[0], 10, 64); err != nil {
		return "", 0, fmt.Errorf("order_id %q is not a number", f[0])
	}
	customer = strings.TrimSpace(f[1])
	if customer == "" || len(customer) > 64 {
		return "", 0, fmt.Errorf("customer_id %q is empty or longer than 64 bytes", customer)
	}
	units, frac, _ := strings.Cut(f[2], ".")
	if len(frac) > 2 {
		return "", 0, fmt.Errorf("amount %q has more than two decimals", f[2])
	}
	frac += strings.Repeat("0", 2-len(frac))
	u, err1 := strconv.ParseUint(units, 10, 32)
	c, err2 := strconv.ParseUint(frac, 10, 8)
	if err1 != nil || err2 != nil {
		return "", 0, fmt.Errorf("amount %q is not a non-negative decimal", f[2])
	}
	return customer, int64(u)*100 + int64(c), nil
}
