// Package redissink is the Redis sink of the `idempotent` strategy, and a
// place for a plain Go job to commit Redis commands together with its
// source position (Sink.CommitSource).
//
// Open (or New) gives a Sink, one connection pool; Sink.Job binds it to one
// job, and the Job's methods are the protocol below. Every key of a job
// starts with mb:{job}:, so a Job is all a caller needs to pass around.
//
// # Protocol
//
// Redis has no transaction that could hold a batch's results together with
// its offsets across the time it takes to process the batch, so
// exactly-once is built from three pieces instead:
//
//  1. A logged plan. The offset ranges of batch N are written
//     (Job.LogPlan) before the batch is read, and whoever finishes the
//     batch after a crash or a rebalance re-runs the logged ranges
//     (Job.PendingRanges), so a replay reads exactly the records of the
//     first attempt even if more arrived in between.
//  2. Deterministic contribution keys. Each partition range's results are
//     written (Job.WriteContribution) under a key named after the range,
//     mb:{job}:contrib:{topic}:{partition}:{from}-{to}, replacing whatever
//     the key held: writing a range twice leaves the same key, not twice
//     the totals.
//  3. An atomic, offset-guarded fold. One Lua script (Job.Fold) checks the
//     fencing epochs, the logged plan and every range's stored offset
//     first, and only then adds the contributions into the users' totals,
//     moves their dead letters, advances the offsets and deletes the
//     contributions. A range is folded only while its offset still equals
//     the range's start, so no batch is ever counted twice, and a fold that
//     fails changes nothing.
//
// # Fencing and the plan log
//
// Fencing and the plan log are per partition, because the processes of a
// consumer group share a job, each owning some partitions, and partitions
// move between them at rebalances. A claim (Job.ClaimPartitions) stamps a
// new epoch on the partitions it takes, and every script refuses a range
// whose partition carries a newer epoch than the caller's: the process
// that held a partition before can't write it any more, even if it still
// owns others, while a member claiming its own partitions fences nobody
// else's. A partition without an epoch of its own falls back to the job's
// epoch, which is always the newest ever handed out; Job.Claim, the
// whole-job claim of a single instance, raises it and drops every
// partition's own epoch, so it fences every older holder of every
// partition. Likewise the plan log keeps each partition's last logged
// range (plan:parts): a process given a partition at a rebalance finishes
// the range its previous owner logged but did not fold, with the same
// records and batch id, so no contribution is orphaned. Batch ids come
// from one counter per job (Job.NextBatchID), so no two processes log the
// same id.
//
// # Key layout
//
// {job} is a Redis hash tag: all keys of a job live in one cluster slot,
// which a multi-key script needs. The layout is a public contract (README,
// "Redis layout"):
//
//	mb:{job}:totals:events   hash  event key -> events      (users' view)
//	mb:{job}:totals:amount   hash  event key -> amount sum  (users' view;
//	                               exact, past int64 too: sums are decimal
//	                               integers of any size, HGET them as text)
//	mb:{job}:offsets         hash  "topic/partition" -> next offset
//	mb:{job}:epoch           string  highest epoch handed out for the job;
//	                               the epoch of partitions not in epochs
//	mb:{job}:epochs          hash  "topic/partition" -> epoch of its last claim
//	mb:{job}:batch           string  last batch id handed out (NextBatchID)
//	mb:{job}:plan:{batchID}  string  JSON [{topic, partition, from, to}]
//	                               (for LastPlan and inspection; the last 100 ids kept)
//	mb:{job}:plan:last       string  highest batch id logged
//	mb:{job}:plan:parts      hash  "topic/partition" -> "{batchID} {from} {to}",
//	                               the partition's last logged range
//	mb:{job}:contrib:{topic}:{partition}:{from}-{to}
//	                         hash  "t:"+key -> "events,amount",
//	                               "a:"+table+":"+column+NUL+row key -> sum,
//	                               "s:"+table+":"+column+NUL+row key -> text,
//	                               "u:"+table+":"+column+NUL+row key -> ""
//	                                 (delete: a per-column replace with nil,
//	                                 or a row job's delete row),
//	                               "n:"+table+":"+column+NUL+row key -> least,
//	                               "x:"+table+":"+column+NUL+row key -> greatest,
//	                               "l:"+table+":"+column+NUL+row key -> least text,
//	                               "g:"+table+":"+column+NUL+row key -> greatest text
//	                                 (a user-defined job's rows by the column's
//	                                 rule: MergeAdd, MergeReplace, MergeMin,
//	                                 MergeMax, MergeMinBytes, MergeMaxBytes;
//	                                 least and greatest are decimal text,
//	                                 compared exactly by the fold, least and
//	                                 greatest text compared byte by byte),
//	                               "d:"+offset -> dead letter JSON,
//	                               "n" -> how many dead letters are staged,
//	                               "m" -> the range (marks even an empty one)
//	mb:{job}:contrib:{topic}:{partition}:{from}-{to}:dead
//	                         hash  offset -> dead letter JSON: a large
//	                               contribution's dead letters, staged in
//	                               bounded steps before it (Contribution)
//	mb:{job}:dead:{topic}:{partition}
//	                         hash  offset -> {"reason": …, "payload": base64}
//	mb:{job}:rows:{table}:{column}
//	                         hash  row key -> value  (users' view of a
//	                               user-defined job: one hash per value
//	                               column of its Upsert; RowField; no field
//	                               for a NULL)
//	mb:{job}:source:{source} hash  position, epoch, chunks: a plain job's
//	                               source position (Sink.CommitSource)
//
// A user-defined job (strategies.NewTransform) writes rows of an Upsert
// instead of per-key totals (Job.WriteRowsContribution, Job.FoldRows): the
// same plan, contribution keys, fencing and fold, so the same guarantee,
// with the rows hashes in place of the totals hashes. A row job can only
// upsert here (REPLACE INTO … (PRIMARY KEY …)): its delete rows (a Kafka
// tombstone, writers.Delete) remove the key's field from every value hash
// in the fold; an append (writers.MergeAppend) is refused, since a hash
// keeps one field per key and two equal rows could never be two.
//
// # Scripts
//
// The Lua scripts live in the *.lua files of this package, each with a
// header naming its KEYS and ARGV; a script is its helper files (fence.lua,
// exact.lua, hset.lua, check_contribution.lua) followed by its own text.
//
// # Guarantee
//
// The totals hashes count every record exactly once once the job has
// caught up. A reader during a run or a recovery may find a batch not yet
// counted (its contribution is written but not folded), never counted
// twice and never half counted; totals, dead letters and offsets always
// agree with each other, because the fold moves all three at once.
//
// # Retries
//
// Every call may be repeated after a retryable error (IsRetryable), even
// when the first attempt may have landed: WriteContribution replaces its
// key or does nothing once the range is folded (so do a Contribution's
// calls; staging a dead letter again overwrites it), LogPlan accepts the
// same plan again, Fold skips ranges already folded, a repeated Claim or
// ClaimPartitions only takes a higher epoch, which fences nobody but the
// caller's own past, and a repeated NextBatchID skips an id.
//
// # Logging
//
// The package prints nothing, but go-redis logs through a process-wide
// logger of its own, to stderr ("redis: connection pool: failed to dial
// after 5 attempts: …") while it can't reach the server. The package
// leaves that setting to the program; microbatch's command sends those
// lines to its own logger at debug level (redis.SetLogger).
package redissink
