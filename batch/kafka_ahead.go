package batch

import "context"

// ahead is a partition's fetch sent as soon as a Read has fetched the
// last of its range: the first fetch of the range that starts where that
// one ends. It goes out while the task processes the range's last
// records and commits, while the driver waits for the batch's other
// tasks and plans the next one, so that the partition's next Read — in a
// backlog, at once — finds its first response there instead of waiting a
// round trip for it. The partition's connection goes with it.
//
// A Read uses it only if its range starts at from: any other Read of the
// partition (the same range again after a failed commit, a partition
// given back by a rebalance and planned from elsewhere) discards it, cut
// short if it is still in flight. It is never more than one response per
// partition, fetched with the source's FetchBytes, and it never waits at
// the broker (MaxWait 0): with nothing there yet it brings nothing, and is
// dropped. Its errors are never reported: a Read that finds it failed
// fetches for itself, under its own retries, and meets any error that
// lasts there.
type ahead struct {
	from   int64
	size   int32
	cancel context.CancelFunc
	ctx    context.Context
	done   chan struct{} // closed once got and conn are final

	got  *fetched    // the first answer of the range from `from`; nil if none worth keeping
	conn *brokerConn // the partition's connection; nil if the fetch failed or was cut short
}

// reserve registers an ahead fetch of part from offset from on conn,
// before the Read that ends there has its last answer: the partition's
// next Read then waits for it rather than opening another connection. It
// returns nil (and conn stays the caller's) if the source is closed.
func (s *KafkaSource) reserve(part int32, from int64, conn *brokerConn) *ahead {
	size := s.FetchBytes
	if size <= 0 {
		size = defaultFetchBytes
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &ahead{from: from, size: size, ctx: ctx, cancel: cancel, done: make(chan struct{}), conn: conn}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		cancel()
		return nil
	}
	if s.ahead == nil {
		s.ahead = make(map[int32]*ahead)
	}
	if s.ahead[part] != nil {
		// Left by the fetcher of a cancelled Read that outlived it: the
		// next Read discards that one; this one goes without.
		cancel()
		return nil
	}
	s.ahead[part] = a
	return a
}

// fetch sends the ahead fetch and keeps its answer if it brought anything
// to read. It runs on the goroutine of the fetcher that reserved it (one
// the source's Close waits for).
func (a *ahead) fetch(s *KafkaSource, part int32) {
	defer close(a.done)
	if a.ctx.Err() != nil {
		return // discarded before it went out; the connection is intact
	}
	blk, throttled, err := fetchFor(a.ctx, a.conn, s.topic, part, a.from, a.size, 0)
	if err != nil {
		_ = a.conn.Close()
		a.conn = nil
		return
	}
	at := step{next: a.from, size: a.size}
	st, err := advance(blk, at, throttled)
	if err != nil || st.wait {
		return // nothing to read yet, or something the Read must meet itself
	}
	a.got = &fetched{blk: blk, step: st}
}

// abandon ends an ahead fetch that never went out (its Read returned
// before taking the last answer): nothing to keep but the connection.
func (a *ahead) abandon() {
	a.cancel()
	close(a.done)
}

// claim waits for a, taken from the source by the partition's next Read
// (at from), and returns its answer if that Read's range starts where a
// fetched, and the connection. An ahead fetch for any other offset is cut
// short if still in flight. If ctx ends first, the fetch is cut short
// too, and claim returns ctx's error with the connection (or nil).
func (a *ahead) claim(ctx context.Context, from int64) (*fetched, *brokerConn, error) {
	if a.from != from {
		a.cancel()
	}
	var err error
	select {
	case <-a.done:
	case <-ctx.Done():
		a.cancel()
		<-a.done
		err = ctx.Err()
	}
	a.cancel()
	if a.from != from || err != nil {
		return nil, a.conn, err
	}
	return a.got, a.conn, nil
}

// closeAhead cuts short the source's ahead fetches and, once their
// goroutines have ended (after s.fetchers.Wait), closes their connections.
func closeAhead(all []*ahead) {
	for _, a := range all {
		<-a.done
		if a.conn != nil {
			_ = a.conn.Close()
		}
	}
}
