package record

import (
	"fmt"
	"regexp"
)

// Range is one partition's share of a batch: offsets [From, To).
type Range struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	From      int64  `json:"from"`
	To        int64  `json:"to"`
}

// Len is the number of offsets the range spans (records plus any
// transaction markers among them).
func (r Range) Len() int64 { return r.To - r.From }

func (r Range) String() string {
	return fmt.Sprintf("%s/%d[%d,%d)", r.Topic, r.Partition, r.From, r.To)
}

// DeadLetter is a record that could not be processed, with the reason.
type DeadLetter struct {
	Job       string
	Topic     string
	Partition int32
	Offset    int64
	Reason    string
	Payload   []byte
}

// topicRE is Kafka's legal topic name. Sinks rely on it too: it keeps ":"
// and "/" out of the Redis keys and fields built from a topic.
var topicRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,249}$`)

// ValidTopic reports whether name is a legal Kafka topic name (1 to 249 of
// A-Z, a-z, 0-9, '.', '_', '-').
func ValidTopic(name string) bool { return topicRE.MatchString(name) }
