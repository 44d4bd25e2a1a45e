// Package docs holds the user documentation beyond the README — one
// Markdown page per topic, each linked from the README — and the tests
// that keep all of the repository's Markdown honest. It has no Go code.
//
// # Pages
//
//   - configuration.md: every `microbatch run` setting (flag, config-file
//     key, MICROBATCH_* variable), the config file all commands share,
//     progress output, --dry-run, broker limits.
//   - security.md: Kafka TLS and SASL, sink passwords and TLS, where
//     secrets are (never) shown.
//   - operations.md: the status page and metrics, several instances,
//     restarts, `microbatch offsets`, exit codes.
//   - commit.md: how a batch is committed (`txn`), bad input, totals past
//     int64, stops and read-committed input.
//   - checkpoint.md: continuous mode (barrier checkpoints, two-phase-commit
//     sinks, the write-ahead sink).
//   - redis-layout.md: `idempotent` on Redis, its keys and guarantee.
//   - crash-points.md: MICROBATCH_CRASH_AT and what verify judges.
//   - library.md: the Go API and the examples.
//   - tables.md: the mb_* tables (writers' schema test holds them to the
//     DDL).
//   - performance.md: throughput and `microbatch bench`, pointing into
//     benchmarks/README.md.
//   - docker.md: the compose stack (docker's tests hold it to compose.yml).
//   - testing.md: the test suite for development.
//   - status-page.png: the picture of the status page in operations.md.
//
// # Tests
//
// TestMarkdownLinks and TestMarkdownCodeFences parse every *.md file of
// the repository with goldmark (GitHub's flavour): a link to a missing
// file or heading anchor, or a code fence that swallows the text after
// it, fails. TestDocsLinkedFromReadme fails for a page in docs/ that the
// README does not link to. TestThroughputMatchesBenchmarks holds every
// "about N–M events/s" in the README and docs/ to the measured table in
// benchmarks/README.md. TestLibrarySnippetsCompile builds every ```go
// block of the README and docs/ as a program of a separate module (with
// stubs for what a snippet leaves to its reader), so a renamed API fails
// there before a user copies the old name.
//
// Other packages' tests read sections of these pages, so that the pages
// can't drift from the code: the README's "Pointing it at real servers"
// commands (cmd/microbatch, TestReadmeRealServers), the `sink` row of
// configuration.md (TestSinkHelp), the exit codes of `offsets` in
// operations.md (TestOffsetsShowPositions), tables.md (writers,
// TestReadmeTablesMatchSchema) and docker.md (docker's tests).
package docs
