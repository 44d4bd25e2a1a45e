package batch

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// brokerConn is one connection of the source's own to a broker, speaking
// the few requests a fetch needs (SASL, Fetch v11) one at a time. It
// exists so that a fetch response reaches the reader as bytes: sarama's
// Broker decodes every record of it into a *sarama.Record, which cost the
// job more CPU than its own work on wide records. The requests are
// encoded and the responses decoded by franz-go's kmsg; a response keeps
// its record batches as the raw bytes read (see records.go).
//
// The connection follows the settings of the source's sarama client:
// dialer (proxy), timeouts, TLS, SASL PLAIN and SCRAM, client ID. It
// sends no ApiVersions request: Fetch v11 is served by every broker from
// Kafka 2.3 to 4.x.
type brokerConn struct {
	addr        string
	conn        net.Conn
	clientID    string
	readTimeout time.Duration
	corr        int32
	head        [4]byte
}

// dialBroker opens a connection to addr with conf's network settings and
// authenticates it.
func dialBroker(ctx context.Context, conf *sarama.Config, addr string) (*brokerConn, error) {
	var conn net.Conn
	var err error
	if conf.Net.Proxy.Enable && conf.Net.Proxy.Dialer != nil {
		conn, err = conf.Net.Proxy.Dialer.Dial("tcp", addr)
	} else {
		d := net.Dialer{Timeout: conf.Net.DialTimeout, KeepAlive: conf.Net.KeepAlive, LocalAddr: conf.Net.LocalAddr}
		conn, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	if conf.Net.TLS.Enable {
		tc := &tls.Config{}
		if conf.Net.TLS.Config != nil {
			tc = conf.Net.TLS.Config.Clone()
		}
		if tc.ServerName == "" {
			host, _, _ := net.SplitHostPort(addr)
			tc.ServerName = host
		}
		tconn := tls.Client(conn, tc)
		hctx, cancel := context.WithTimeout(ctx, conf.Net.DialTimeout)
		err := tconn.HandshakeContext(hctx)
		cancel()
		if err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("TLS handshake: %w", err)
		}
		conn = tconn
	}
	c := &brokerConn{addr: addr, conn: conn, clientID: conf.ClientID, readTimeout: conf.Net.ReadTimeout}
	if conf.Net.SASL.Enable {
		if err := c.authenticate(ctx, conf); err != nil {
			_ = conn.Close()
			return nil, err
		}
	}
	return c, nil
}

// Addr is the broker's address, as dialled.
func (c *brokerConn) Addr() string { return c.addr }

// Close closes the connection.
func (c *brokerConn) Close() error { return c.conn.Close() }

// authenticate runs the SASL handshake (v1) and exchange (SaslAuthenticate)
// for PLAIN or SCRAM, the mechanisms kafkautil.Security configures.
func (c *brokerConn) authenticate(ctx context.Context, conf *sarama.Config) error {
	mech := string(conf.Net.SASL.Mechanism)
	if mech == "" {
		mech = sarama.SASLTypePlaintext
	}
	var scram sarama.SCRAMClient
	switch mech {
	case sarama.SASLTypePlaintext:
	case sarama.SASLTypeSCRAMSHA256, sarama.SASLTypeSCRAMSHA512:
		if conf.Net.SASL.SCRAMClientGeneratorFunc == nil {
			return fmt.Errorf("%w: SASL %s without a SCRAM client", errSASL, mech)
		}
		scram = conf.Net.SASL.SCRAMClientGeneratorFunc()
		if err := scram.Begin(conf.Net.SASL.User, conf.Net.SASL.Password, conf.Net.SASL.AuthIdentity); err != nil {
			return fmt.Errorf("%w: %v", errSASL, err)
		}
	default:
		return fmt.Errorf("%w: mechanism %s is not supported by the fetch connection", errSASL, mech)
	}
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version, hs.Mechanism = 1, mech
	hresp := kmsg.NewPtrSASLHandshakeResponse()
	if err := c.roundTrip(ctx, hs, hresp); err != nil {
		return fmt.Errorf("%w: handshake: %v", errSASL, err)
	}
	if hresp.ErrorCode != 0 {
		return fmt.Errorf("%w: handshake: %w", errSASL, sarama.KError(hresp.ErrorCode))
	}
	msg := []byte("\x00" + conf.Net.SASL.User + "\x00" + conf.Net.SASL.Password)
	if scram != nil {
		first, err := scram.Step("")
		if err != nil {
			return fmt.Errorf("%w: %v", errSASL, err)
		}
		msg = []byte(first)
	}
	for {
		req := kmsg.NewPtrSASLAuthenticateRequest()
		req.Version, req.SASLAuthBytes = 1, msg
		resp := kmsg.NewPtrSASLAuthenticateResponse()
		if err := c.roundTrip(ctx, req, resp); err != nil {
			return fmt.Errorf("%w: %v", errSASL, err)
		}
		if resp.ErrorCode != 0 {
			detail := ""
			if resp.ErrorMessage != nil {
				detail = ": " + *resp.ErrorMessage
			}
			return fmt.Errorf("%w: %w%s", errSASL, sarama.KError(resp.ErrorCode), detail)
		}
		if scram == nil || scram.Done() {
			return nil
		}
		next, err := scram.Step(string(resp.SASLAuthBytes))
		if err != nil {
			return fmt.Errorf("%w: %v", errSASL, err)
		}
		if scram.Done() && next == "" {
			return nil
		}
		msg = []byte(next)
	}
}

var errSASL = errors.New("SASL authentication of the fetch connection failed")

// roundTrip sends req and reads its response into resp. It must not be
// used for flexible versions (their headers differ); the requests here
// are not. ctx ending cuts the connection's reads and writes short: the
// connection is unusable then, and the caller closes it.
func (c *brokerConn) roundTrip(ctx context.Context, req kmsg.Request, resp kmsg.Response) (err error) {
	if req.IsFlexible() {
		return fmt.Errorf("brokerConn: %T v%d is flexible", req, req.GetVersion())
	}
	timeout := c.readTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	// The deadline first, then the cancellation's: a cancellation can't
	// be overwritten by the request's own deadline.
	if err := c.conn.SetDeadline(time.Now().Add(timeout + fetchWait)); err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { _ = c.conn.SetDeadline(time.Unix(1, 0)) })
	defer func() {
		if !stop() && err == nil {
			// Cancelled as the response arrived: the past deadline may
			// land on the connection after it is pooled. It is
			// unusable; the caller closes it.
			err = ctx.Err()
		}
	}()
	c.corr++
	// Request header v1: size, api key, version, correlation id, client id.
	buf := make([]byte, 4, 64)
	buf = binary.BigEndian.AppendUint16(buf, uint16(req.Key()))
	buf = binary.BigEndian.AppendUint16(buf, uint16(req.GetVersion()))
	buf = binary.BigEndian.AppendUint32(buf, uint32(c.corr))
	buf = binary.BigEndian.AppendUint16(buf, uint16(len(c.clientID)))
	buf = append(buf, c.clientID...)
	buf = req.AppendTo(buf)
	binary.BigEndian.PutUint32(buf, uint32(len(buf)-4))
	if _, err := c.conn.Write(buf); err != nil {
		return c.cut(ctx, err)
	}
	if _, err := io.ReadFull(c.conn, c.head[:]); err != nil {
		return c.cut(ctx, err)
	}
	size := int32(binary.BigEndian.Uint32(c.head[:]))
	if size < 4 || size > maxFetchBytes+(1<<20) {
		return fmt.Errorf("broker %s answered with a response of %d bytes", c.addr, size)
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(c.conn, body); err != nil {
		return c.cut(ctx, err)
	}
	if got := int32(binary.BigEndian.Uint32(body)); got != c.corr {
		return fmt.Errorf("broker %s answered request %d with the response to %d", c.addr, c.corr, got)
	}
	resp.SetVersion(req.GetVersion())
	if err := resp.ReadFrom(body[4:]); err != nil {
		return fmt.Errorf("decoding %T from broker %s: %w", resp, c.addr, err)
	}
	return nil
}

// cut returns ctx's error for a failure the cancellation caused.
func (c *brokerConn) cut(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}
