package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/microbatch/microbatch/batch"
	"github.com/microbatch/microbatch/internal/status"
	"github.com/microbatch/microbatch/strategies"
)

// statusShutdown bounds how long a stopping run waits for requests to the
// status server in flight.
const statusShutdown = 5 * time.Second

// startStatus serves metrics and the status page on --metrics-addr, if it
// is set, fed by cfg's hooks: the progress hook already set is chained, not
// replaced. The returned stop shuts the server down (a no-op when off);
// call it once the run is over.
func startStatus(s *settings, cfg *strategies.Config) (stop func(), err error) {
	addr := s.str("metrics-addr")
	if addr == "" {
		return func() {}, nil
	}
	group := cfg.Group.ID
	if group == "" {
		group = cfg.Job
	}
	rec := status.NewRecorder(status.Info{
		Job: cfg.Job, Strategy: string(cfg.Strategy), Group: group, Topic: cfg.Topic,
		Sink:       strategies.SinkDisplay(cfg.Sink), // never the password
		Checkpoint: cfg.Strategy == strategies.StrategyCheckpoint,
	}, status.DefaultHistory)
	srv, err := status.Listen(addr, rec.Handler())
	if errors.Is(err, status.ErrAddr) {
		return nil, configError{fmt.Errorf("metrics-addr: %w", err)}
	}
	if err != nil {
		return nil, err
	}
	if cfg.Logger != nil {
		cfg.Logger.Info("status page and metrics", "url", "http://"+srv.Addr()+"/", "metrics", "http://"+srv.Addr()+"/metrics")
	}
	prev := cfg.OnProgress
	cfg.OnProgress = func(p batch.Progress) {
		rec.Progress(p)
		if prev != nil {
			prev(p)
		}
	}
	prevOutage := cfg.OnOutage
	cfg.OnOutage = func(c strategies.OutageChange) {
		rec.Outage(c.Server, c.Sink, c.Down, c.Since)
		if prevOutage != nil {
			prevOutage(c)
		}
	}
	prevFail, prevRecover := cfg.Checkpoint.OnFailure, cfg.Checkpoint.OnRecovery
	cfg.Checkpoint.OnFailure = func(err error) {
		rec.CheckpointFailed(err)
		if prevFail != nil {
			prevFail(err)
		}
	}
	cfg.Checkpoint.OnRecovery = func() {
		rec.Recovered()
		if prevRecover != nil {
			prevRecover()
		}
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), statusShutdown)
		defer cancel()
		if err := srv.Close(ctx); err != nil && cfg.Logger != nil {
			cfg.Logger.Warn("stopping the status server", "err", err)
		}
	}, nil
}
