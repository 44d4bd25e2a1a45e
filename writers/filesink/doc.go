// Package filesink is the file sink of checkpoint mode: a writers.TwoPhase
// writer (Txn, made by New) whose transactions are files of lines,
// written under dir/.pending, flushed and fsynced on PreCommit, and moved
// into dir by an atomic rename on Commit; Read reads what a job
// committed, in transaction order, whole transactions only.
package filesink
