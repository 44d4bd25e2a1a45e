package redissink

import (
	"context"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Sink is a connection to the Redis that holds jobs' results; Job binds it
// to one job. It is safe for concurrent use: partition tasks may write
// contributions and fold in parallel.
type Sink struct {
	c       redis.UniversalClient
	display string

	closeOnce sync.Once
	closeErr  error
}

// Open connects to the Redis named by dsn (see ParseDSN) and checks that it
// answers.
func Open(ctx context.Context, dsn string) (*Sink, error) {
	opts, display, err := ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	c := redis.NewClient(opts)
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		return nil, fmt.Errorf("connecting to sink %s: %w", display, err)
	}
	s := New(c)
	s.display = display
	return s, nil
}

// New wraps a client the caller made (a cluster client works too: a job's
// keys share one slot). Close closes it. Set MaxRetries to -1 to keep
// go-redis from repeating commands behind the caller's back.
func New(c redis.UniversalClient) *Sink {
	return &Sink{c: c, display: "redis"}
}

// Client returns the underlying client, e.g. for reading results.
func (s *Sink) Client() redis.UniversalClient { return s.c }

// String is the sink address without its password.
func (s *Sink) String() string { return s.display }

// Close closes the client. Safe to call twice.
func (s *Sink) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.c.Close() })
	return s.closeErr
}

// Job is a Sink bound to one job: its methods read and write the keys
// mb:{job}:… (see the package doc). It is as safe for concurrent use as
// its Sink, and as cheap: binding a job opens nothing.
type Job struct {
	s    *Sink
	name string
	keys jobKeys
}

// Job binds the sink to job. The name must be usable inside a Redis hash
// tag: not empty, no { or }.
func (s *Sink) Job(job string) (*Job, error) {
	if err := checkJob(job); err != nil {
		return nil, err
	}
	return &Job{s: s, name: job, keys: jobKeys{job: job}}, nil
}

// Name is the job's name.
func (j *Job) Name() string { return j.name }
