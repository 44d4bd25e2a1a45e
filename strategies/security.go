package strategies

import (
	"fmt"

	"github.com/IBM/sarama"
)

// kafkaConfig is the sarama configuration for clientID with the job's
// Kafka security applied. Its errors are configuration errors (a missing
// CA file, say), never retried.
func (c Config) kafkaConfig(clientID string) (*sarama.Config, error) {
	conf, err := c.Kafka.Config(clientID)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	return conf, nil
}
