package kafkautil

import (
	"errors"
	"net"
	"sync"

	"github.com/IBM/sarama"
)

// ErrCut is what dialing through a ConnCutter returns after Cut.
var ErrCut = errors.New("kafkautil: connections cut")

// ConnCutter dials sarama's connections (install it with Use) and can
// close them all at once. That is the only way to end a request sarama is
// blocked on — a JoinGroup the broker holds for a whole rebalance, say:
// sarama's own Close waits for the read timeout first.
type ConnCutter struct {
	dialer net.Dialer
	mu     sync.Mutex
	conns  map[*cutConn]struct{}
	cut    bool
}

// Use makes c dial every connection of conf (TLS is layered on top by
// sarama as usual).
func (c *ConnCutter) Use(conf *sarama.Config) {
	c.dialer = net.Dialer{Timeout: conf.Net.DialTimeout, KeepAlive: conf.Net.KeepAlive, LocalAddr: conf.Net.LocalAddr}
	conf.Net.Proxy.Enable = true
	conf.Net.Proxy.Dialer = c
}

// Dial implements sarama's (golang.org/x/net/proxy) Dialer.
func (c *ConnCutter) Dial(network, addr string) (net.Conn, error) {
	conn, err := c.dialer.Dial(network, addr)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cut {
		conn.Close()
		return nil, ErrCut
	}
	if c.conns == nil {
		c.conns = map[*cutConn]struct{}{}
	}
	cc := &cutConn{Conn: conn, owner: c}
	c.conns[cc] = struct{}{}
	return cc, nil
}

// Cut closes every connection and refuses new ones.
func (c *ConnCutter) Cut() {
	c.mu.Lock()
	c.cut = true
	conns := c.conns
	c.conns = nil
	c.mu.Unlock()
	for cc := range conns {
		_ = cc.Conn.Close()
	}
}

type cutConn struct {
	net.Conn
	owner *ConnCutter
}

func (cc *cutConn) Close() error {
	cc.owner.mu.Lock()
	delete(cc.owner.conns, cc)
	cc.owner.mu.Unlock()
	return cc.Conn.Close()
}

var _ net.Conn = (*cutConn)(nil)
