// Package sqlsink is the SQL sink: MySQL/MariaDB, PostgreSQL and SQLite
// (pure Go, for the zero-install quickstart), and the checkpoint-mode
// writers built on it, XA, PG2PC and WAL. The contracts it implements (writers.Upsert,
// writers.TwoPhase, writers.IsRetryable) are in package writers.
//
// # Transactions
//
// A Writer (Open a DSN, see ParseDSN; or New on a pool the caller opened)
// writes in transactions (Tx): rows of any table (a writers.Upsert: the
// user's table, keys, values, and whether to add or replace — or, per
// column, to add, replace, or keep the least or the greatest, with NULL
// as no value), dead letters
// and progress together — a Kafka partition's offset (Tx.Advance) or any
// other source's position (Tx.AdvanceSource). CreateTables makes the
// built-in tables; CheckUpsert checks a user's table before writing.
//
// # Row jobs and strict mode
//
// A row job's append (writers.MergeAppend: no keys, equal rows are two
// rows) goes in as multi-row INSERTs of up to 1,000 rows (rowsPerStatement,
// within 30,000 placeholders and about 4 MiB of values), prepared once per
// write when it takes two statements or more — into PostgreSQL, inside a
// transaction, as one COPY … FROM STDIN in text format instead, 3.2–3.8 × as
// fast and as strict (postgres_copy.go says why and when not); its upsert may hold delete
// rows (writers.Delete), folded per key in Go (the last row wins) into one
// multi-row upsert and one multi-row DELETE. The XA and WAL writers use the
// same statements; the WAL keeps a delete as {"delete": true} in the
// checkpoint. Every MySQL/MariaDB session runs in StrictSQLMode (set on
// connect, unless the DSN names its own sql_mode), so a value that does
// not fit its column is an error, never truncated, rounded or zero-filled.
//
// # Source positions
//
// Sources that are not Kafka (offsets/source.go): a plain batch job
// commits each chunk's rows together with the position the chunk ended
// at, and resumes from the stored position after a crash.
//
//	w.CreateTables(ctx)
//	claim, _ := w.ClaimSource(ctx, "nightly-import", "customers.csv")
//	from := claim.Position // "" the first time
//	for each chunk read from `from` to `to`:
//	    tx, _ := w.Begin(ctx)
//	    tx.Upsert(ctx, myUpsert, rows)
//	    tx.AdvanceSource(ctx, offsets.SourceAdvance{Job: …, Source: …, From: from, To: to, Epoch: claim.Epoch})
//	    tx.Commit()
//	    from = to
//
// CommitSource does the same with retries and settles a commit whose
// outcome is unknown (SourceLanded).
//
// # Checkpoint mode
//
// XA (NewXA) is the MySQL/MariaDB two-phase writer: one XA transaction per
// checkpoint interval, prepared on PreCommit and committed by any
// connection after a restart. PG2PC (NewPG2PC) is PostgreSQL's: PREPARE
// TRANSACTION on PreCommit, COMMIT PREPARED on Commit, recovery from
// pg_prepared_xacts; CheckMaxPrepared refuses a server that allows no
// prepared transactions. WAL (NewWAL) is the write-ahead variant for
// a sink without two-phase commit: writes wait in the checkpoint and are
// applied, once, after it completes; its doc says why it is weaker.
// Both share the Writer's upsert and dead-letter statements.
package sqlsink
