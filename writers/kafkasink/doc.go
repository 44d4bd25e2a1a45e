// Package kafkasink is the Kafka sink of checkpoint mode: Txn, one sink
// subtask's writer, puts the records of checkpoint interval n into Kafka
// transaction n, which PreCommit flushes and Commit makes visible to
// read-committed consumers — in this process or, from the Pending stored in
// the checkpoint, in another one after a crash. WriteOffsets adds a consumer
// group's input offsets to the transaction (consume-transform-produce,
// KIP-98). Config says how to connect (Security: TLS and SASL) and
// CheckTxnTimeout whether a transaction timeout leaves a pre-committed
// transaction time to be committed.
//
// Files: config.go (Config and its checks), txn.go (the writer's life:
// New, Begin, Write, PreCommit, Close), slot.go (one transactional
// producer per slot), kgo.go (the producers' options), message.go
// (recycled records), offsets.go (WriteOffsets), recover.go (Commit,
// Abort and Recover: finishing by identity, fencing), coordinator.go
// (requests to the transaction coordinator and their retries).
//
// # Slots
//
// A transactional.id holds at most one open transaction, but while
// transaction n is pre-committed (waiting for checkpoint n to complete)
// transaction n+1 is already being written. So a subtask rotates through
// Slots transactional ids, "<prefix>-<k>": transaction n uses slot
// n % Slots, with one franz-go transactional producer (a kgo client) per
// slot, created lazily. Creating it sends InitProducerId, which aborts
// whatever that id still had open and fences older producers of it.
// Requests to the coordinator by identity (DescribeTransactions, EndTxn,
// AddOffsetsToTxn, TxnOffsetCommit) go through one sarama client.
//
// A slot's producer is reused from one transaction to the next without a
// new InitProducerId, so its transactions share a producer id and epoch:
// the producers speak transaction version 1 (Produce up to v11, EndTxn up
// to v4, kgo.go), whose EndTxn doesn't bump the epoch per transaction, even
// on a Kafka 4 cluster with transaction version 2 (KIP-890) enabled. A
// commit by (id, producer id, epoch) — which is all a Pending holds, and
// all a recovery in another process can send — therefore commits whatever
// transaction that id has open. It is only safe because the caller
// guarantees that a slot is reused only after its previous transaction
// was committed or aborted, and that a committed transaction's slot is
// not reused before a later checkpoint, one that no longer lists it, has
// completed. Then the latest complete checkpoint never lists a Pending
// whose id has since started another transaction, and a recovery commit
// can't commit a newer transaction by mistake. That takes at least 3
// slots (n pre-committed, n+1 open, and n-1's slot still protected until
// checkpoint n completes), which is the default and the minimum.
//
// Slots must stay the same across restarts of a job: Recover aborts what
// ids 0..Slots-1 left open, not ids an earlier, larger Slots used.
//
// # Retries
//
// Commit and Abort are idempotent (see writers.TwoPhase). Commit retries by
// itself, for a bounded time, on the errors that mean the transaction
// coordinator moved or is busy; an error it returns after that is worth
// retrying unless it wraps writers.ErrTxnLost. Write and PreCommit are not
// retried: after a failure the open transaction is unusable.
package kafkasink
