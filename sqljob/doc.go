// Package sqljob compiles a SQL job — one
// INSERT INTO <table> SELECT … FROM <topic> [WHERE …] [GROUP BY …] — into Go
// closures that aggregate JSON records exactly, and describes the table
// it writes.
//
// Compile parses the statement with a parser written for this subset of
// MySQL (parse.go: MySQL's tokens, quoting and precedence) and checks it
// once: what it can't run is an *Error (ErrQuery) naming the construct and
// its line and column, and where there is one, the form to write instead. Nothing of the parser's tree is walked per record.
// A record is read by a scanner that checks it is one valid JSON object
// and captures the fields the query names in the same pass, with no
// allocation for records without escapes; numbers stay decimal text until
// used, and arithmetic, sums, minima and maxima are exact decimals.
//
// An Aggregate holds one batch's groups: Add each record (a *Rejection
// means bad input, to dead-letter with its reason), then Rows gives one row
// per group for the sinks, whose per-column merge rules (Query.Upsert) add
// COUNT and SUM and keep the least MIN and greatest MAX. Aggregates of
// the same query merge (Merge), so partitions can aggregate apart.
// strategies.SQLTransform runs a Query as a job with any strategy.
//
// A query without aggregates and without GROUP BY is a row job
// (Query.RowJob): Query.Row turns each record, with its own fields
// (Meta: _key, _partition, _offset, _timestamp), into one row. INSERT
// INTO appends every row (Upsert's Merge is writers.MergeAppend);
// REPLACE INTO t (PRIMARY KEY (…)) SELECT … keeps the latest row per key
// (MergeReplace), and a tombstone deletes its _key's row. EnsureTable
// binds each column's exact converter to an existing table's real type:
// a value the column can't hold exactly is a *Rejection, never
// truncated or rounded by the server.
//
// A table has no job column, so it belongs to one job and one query:
// Query.Claim records the job and the query's Fingerprint in
// mb_sql_tables and refuses another job, or the job with another query
// (*OwnerError, ErrTableOwned); DisownTable empties a table and frees it.
// Run claims the table itself before its first batch.
//
// See docs/sql-jobs.md for the language and its semantics.
package sqljob
