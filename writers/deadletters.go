package writers

import "github.com/microbatch/microbatch/internal/reason"

// MaxReasonBytes bounds mb_dead_letters.reason; longer reasons are cut at
// a character boundary, and bytes that are not UTF-8 are escaped (\xff).
const MaxReasonBytes = 1024

// MaxPayloadBytes bounds the payload stored with a dead letter. A larger
// record keeps its first MaxPayloadBytes and says so in its reason; the
// whole record stays addressable in Kafka by (topic, part, off). Without a
// bound one huge bad record could exceed max_allowed_packet and fail its
// batch on every retry, stopping the pipeline.
const MaxPayloadBytes = 4 << 20

// StoredReason is a dead letter's reason as every sink stores it: valid
// UTF-8 (bytes that are not are escaped, \xff) of at most MaxReasonBytes,
// cut at a character boundary. MySQL/MariaDB's utf8mb4 column refuses
// other bytes (error 1366), which an INSERT IGNORE turns into a warning
// and a '?' per byte; JSON (Redis, the WAL's checkpoint) turns them into
// U+FFFD. Either way the reason would lose what it quotes.
func StoredReason(s string) string { return reason.Safe(s, MaxReasonBytes) }
