package testutil

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// CutProxy stands between a client and a server on loopback and breaks the
// connection on demand: CutAll closes every connection (a lost connection
// before, during or after a command), DropReplies makes it swallow the
// server's replies and close (the command ran, the client can't know), and
// Close stops listening (connection refused).
//
// Arm places one cut exactly: on the n-th message a client sends after the
// call, so that a test can make the cut land inside the write it must hit
// instead of hoping a timer does. A "message" is what one read from the
// client returns; the SQL and Redis clients send each command (or
// pipeline) in one write and wait for its reply before the next, so it is
// one command, or a part of one too big for a read.
type CutProxy struct {
	ln    net.Listener
	Cuts  atomic.Int64 // CutAll calls
	Fired atomic.Int64 // armed cuts that fired
	// Messages counts client messages forwarded or cut (see Arm).
	Messages atomic.Int64

	dropReplies atomic.Bool
	refusing    atomic.Bool
	wg          sync.WaitGroup
	mu          sync.Mutex
	conns       map[net.Conn]bool
	arm         armedCut // guarded by mu
}

// CutMode says where an armed cut lands.
type CutMode int

const (
	// CutBeforeForward closes the connection instead of forwarding the
	// message: the server never sees the command.
	CutBeforeForward CutMode = iota
	// CutAfterForward forwards the message and closes the connection when
	// the server replies, dropping the reply: the command ran, the client
	// can't know.
	CutAfterForward
)

func (m CutMode) String() string {
	if m == CutAfterForward {
		return "after forwarding (reply lost)"
	}
	return "before forwarding"
}

type armedCut struct {
	on   bool
	left int // messages still to pass; the cut lands on the one that makes it 0
	mode CutMode
}

// StartCutProxy forwards a new loopback port to target until the test ends.
func StartCutProxy(t testing.TB, target string) *CutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &CutProxy{ln: ln, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if p.refusing.Load() {
				c.Close() // the server is gone
				continue
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			if p.refusing.Load() { // turned on while we dialed: under mu, so CutAll can't miss it
				p.mu.Unlock()
				c.Close()
				s.Close()
				continue
			}
			p.conns[c], p.conns[s] = true, true
			p.mu.Unlock()
			// dropNext: an armed cut forwarded this connection's message,
			// the next reply is to be lost.
			var dropNext atomic.Bool
			closeBoth := func() {
				c.Close()
				s.Close()
				p.mu.Lock()
				delete(p.conns, c)
				delete(p.conns, s)
				p.mu.Unlock()
			}
			p.wg.Add(2)
			go func() {
				defer p.wg.Done()
				defer closeBoth()
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						switch cut, mode := p.count(); {
						case cut && mode == CutBeforeForward:
							return // never forwarded
						case cut:
							dropNext.Store(true)
						}
						if _, werr := s.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
			go func() {
				defer p.wg.Done()
				defer closeBoth()
				buf := make([]byte, 64<<10)
				for {
					n, err := s.Read(buf)
					if n > 0 && (p.dropReplies.Load() || dropNext.Load()) {
						return // the reply is lost
					}
					if n > 0 {
						if _, werr := c.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(p.Close)
	return p
}

// count counts one client message against an armed cut and reports
// whether the cut lands on it, and how.
func (p *CutProxy) count() (cut bool, mode CutMode) {
	p.Messages.Add(1)
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.arm.on {
		return false, 0
	}
	if p.arm.left--; p.arm.left > 0 {
		return false, 0
	}
	p.arm.on = false
	p.Fired.Add(1)
	return true, p.arm.mode
}

// Addr is the address clients should dial.
func (p *CutProxy) Addr() string { return p.ln.Addr().String() }

// CutAll closes every open connection.
func (p *CutProxy) CutAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
	p.Cuts.Add(1)
}

// Refuse makes the server look gone while on — every open connection is
// cut and each new one closed at once, before the server's greeting —
// and reachable again when off. It is how a test takes the server away
// for a while (an outage, a failover) without stopping the shared one.
func (p *CutProxy) Refuse(on bool) {
	p.mu.Lock()
	p.refusing.Store(on)
	p.mu.Unlock()
	if on {
		p.CutAll()
	}
}

// DropReplies makes the proxy lose server replies (and close) while on.
func (p *CutProxy) DropReplies(on bool) { p.dropReplies.Store(on) }

// Arm makes the proxy cut the connection that carries the n-th client
// message (n ≥ 1) from now on, on any connection, in the way mode says.
// It replaces a cut armed before that has not fired.
func (p *CutProxy) Arm(n int, mode CutMode) {
	if n < 1 {
		panic("testutil: CutProxy.Arm needs n ≥ 1")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.arm = armedCut{on: true, left: n, mode: mode}
}

// Disarm cancels an armed cut and reports whether there was one still
// waiting for its message (false: it fired, or none was armed).
func (p *CutProxy) Disarm() (pending bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pending = p.arm.on
	p.arm.on = false
	return pending
}

// Close stops listening, cuts every connection and waits for the copiers.
// Safe to call twice.
func (p *CutProxy) Close() {
	p.ln.Close()
	p.CutAll()
	p.wg.Wait()
}
