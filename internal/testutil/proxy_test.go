package testutil

import (
	"bufio"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// lineServer answers each line it reads with "ok <line>" and records the
// lines, so a test can tell whether a message reached it.
type lineServer struct {
	ln   net.Listener
	mu   sync.Mutex
	seen []string
	wg   sync.WaitGroup
}

func startLineServer(t *testing.T) *lineServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &lineServer{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					s.mu.Lock()
					s.seen = append(s.seen, sc.Text())
					s.mu.Unlock()
					if _, err := c.Write([]byte("ok " + sc.Text() + "\n")); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); s.wg.Wait() })
	return s
}

func (s *lineServer) lines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.seen...)
}

// call sends one line and reads its reply.
func call(c net.Conn, r *bufio.Reader, line string) (string, error) {
	if err := c.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
		return "", err
	}
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	reply, err := r.ReadString('\n')
	return strings.TrimSuffix(reply, "\n"), err
}

// TestCutProxyArm: an armed cut lands on the n-th message after Arm —
// before forwarding, the server never sees it; after forwarding, the
// server ran it and the reply is lost — exactly once; Disarm cancels one
// that has not fired.
func TestCutProxyArm(t *testing.T) {
	for _, mode := range []CutMode{CutBeforeForward, CutAfterForward} {
		t.Run(mode.String(), func(t *testing.T) {
			srv := startLineServer(t)
			p := StartCutProxy(t, srv.ln.Addr().String())
			dial := func() (net.Conn, *bufio.Reader) {
				c, err := net.Dial("tcp", p.Addr())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				return c, bufio.NewReader(c)
			}
			c, r := dial()
			if got, err := call(c, r, "a"); err != nil || got != "ok a" {
				t.Fatalf("before arming: %q, %v", got, err)
			}
			p.Arm(3, mode)
			// Messages 1 and 2 pass, on two connections: the count is the
			// proxy's, not a connection's.
			c2, r2 := dial()
			for i, cr := range []struct {
				c net.Conn
				r *bufio.Reader
			}{{c, r}, {c2, r2}} {
				line := string(rune('b' + i))
				if got, err := call(cr.c, cr.r, line); err != nil || got != "ok "+line {
					t.Fatalf("message %d after arming: %q, %v", i+1, got, err)
				}
			}
			if _, err := call(c, r, "cut"); err == nil {
				t.Fatal("the third message after arming got a reply")
			}
			reached := strings.Join(srv.lines(), " ")
			want := map[CutMode]string{CutBeforeForward: "a b c", CutAfterForward: "a b c cut"}[mode]
			// The server may read "cut" just after the reply was lost.
			deadline := time.Now().Add(30 * time.Second)
			for reached != want && mode == CutAfterForward && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
				reached = strings.Join(srv.lines(), " ")
			}
			if reached != want {
				t.Fatalf("server saw %q, want %q", reached, want)
			}
			if p.Fired.Load() != 1 {
				t.Fatalf("Fired = %d, want 1", p.Fired.Load())
			}
			// Fired once: the other connection and new ones go on.
			if got, err := call(c2, r2, "d"); err != nil || got != "ok d" {
				t.Fatalf("after the cut, another connection: %q, %v", got, err)
			}
			c3, r3 := dial()
			if got, err := call(c3, r3, "e"); err != nil || got != "ok e" {
				t.Fatalf("after the cut, a new connection: %q, %v", got, err)
			}
			if p.Disarm() {
				t.Fatal("Disarm after the cut fired says one was pending")
			}
			p.Arm(5, mode)
			if got, err := call(c3, r3, "f"); err != nil || got != "ok f" {
				t.Fatalf("armed for the 5th: %q, %v", got, err)
			}
			if !p.Disarm() {
				t.Fatal("Disarm before the 5th message says none was pending")
			}
			for _, line := range []string{"g", "h", "i", "j", "k"} {
				if got, err := call(c3, r3, line); err != nil || got != "ok "+line {
					t.Fatalf("disarmed: %q, %v", got, err)
				}
			}
			if p.Fired.Load() != 1 {
				t.Fatalf("Fired = %d after Disarm, want 1", p.Fired.Load())
			}
		})
	}
}
