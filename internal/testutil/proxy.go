package testutil

import (
	"io"
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
type CutProxy struct {
	ln   net.Listener
	Cuts atomic.Int64 // CutAll calls

	dropReplies atomic.Bool
	wg          sync.WaitGroup
	mu          sync.Mutex
	conns       map[net.Conn]bool
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
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns[c], p.conns[s] = true, true
			p.mu.Unlock()
			p.wg.Add(2)
			go func() {
				defer p.wg.Done()
				_, _ = io.Copy(s, c)
				c.Close()
				s.Close()
			}()
			go func() {
				defer p.wg.Done()
				defer c.Close()
				defer s.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := s.Read(buf)
					if n > 0 && p.dropReplies.Load() {
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

// DropReplies makes the proxy lose server replies (and close) while on.
func (p *CutProxy) DropReplies(on bool) { p.dropReplies.Store(on) }

// Close stops listening, cuts every connection and waits for the copiers.
// Safe to call twice.
func (p *CutProxy) Close() {
	p.ln.Close()
	p.CutAll()
	p.wg.Wait()
}
