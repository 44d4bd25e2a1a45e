package status

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// page is the status page: one HTML file with its CSS and JavaScript
// inline, so the binary needs no build step and the browser no other
// server. It polls api/progress every second.
//
//go:embed page.html
var page []byte

// Handler serves the page at /, the metrics at /metrics and the progress
// at /api/progress.
func (r *Recorder) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		// The page holds all it needs: forbid anything from elsewhere.
		w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'unsafe-inline'; script-src 'unsafe-inline'")
		_, _ = w.Write(page)
	})
	mux.HandleFunc("GET /api/progress", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(r.Snapshot())
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{Registry: r.reg}))
	return mux
}

// ListenAddr resolves a --metrics-addr value: a bare ":port" binds the
// loopback interface, not every interface — the page is for the operator
// on the machine unless an address says otherwise.
func ListenAddr(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err == nil {
		_, err = strconv.ParseUint(port, 10, 16)
	}
	if err != nil {
		return "", fmt.Errorf("%w: %q: want host:port or :port", ErrAddr, addr)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// Server is the HTTP server of one Recorder.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	done chan error // Serve's result
}

// Listen binds addr (see ListenAddr) and serves h on it until Close.
func Listen(addr string, h http.Handler) (*Server, error) {
	addr, err := ListenAddr(addr)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		// In use, not this host's, a privileged port: the setting must
		// change either way.
		return nil, fmt.Errorf("%w: %v", ErrAddr, err)
	}
	s := &Server{
		srv:  &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second},
		ln:   ln,
		done: make(chan error, 1),
	}
	go func() { s.done <- s.srv.Serve(ln) }()
	return s, nil
}

// Addr is the address the server listens on (with the port the system
// chose for ":0").
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops accepting, lets requests in flight finish until ctx is done
// (then cuts them), and returns once the serving goroutine has ended.
func (s *Server) Close(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if err != nil {
		err = errors.Join(err, s.srv.Close())
	}
	if serr := <-s.done; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}
