package egress

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"
)

// Resolver returns the addresses of a host name.
type Resolver func(ctx context.Context, host string) ([]netip.Addr, error)

// Dialer connects to a checked address.
type Dialer func(ctx context.Context, addr netip.AddrPort) (net.Conn, error)

// SystemResolver and SystemDialer are the defaults: the gateway's own
// resolver and network.
func SystemResolver(ctx context.Context, host string) ([]netip.Addr, error) {
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

func SystemDialer(ctx context.Context, addr netip.AddrPort) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr.String())
}

const (
	headerTimeout = 10 * time.Second // to send the CONNECT request
	dialTimeout   = 10 * time.Second
	maxHeader     = 8 << 10
)

// Proxy serves HTTP CONNECT for one server on a listener inside that
// server's network namespace: every connection on it comes from that server.
type Proxy struct {
	rules   Rules
	resolve Resolver
	dial    Dialer
	l       net.Listener
	log     func(Decision)

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// Decision is the proxy's answer to one CONNECT request.
type Decision struct {
	Host    string         // as asked
	Port    int            // as asked
	Address netip.AddrPort // connected to, or refused; zero when refused before resolution
	Allowed bool
	Reason  string // why refused; "" when allowed
}

// Serve starts serving l with rules; log, if not nil, is told of each
// CONNECT request with a host and port, from the connection's goroutine,
// before the answer is sent. Close stops it.
func Serve(l net.Listener, rules Rules, resolve Resolver, dial Dialer, log func(Decision)) *Proxy {
	p := &Proxy{rules: rules, resolve: resolve, dial: dial, l: l, log: log, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p
}

// Close stops accepting, cuts every open connection and returns once all
// of the proxy's goroutines have ended.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	err := p.l.Close()
	p.wg.Wait()
	return err
}

// track registers c to be cut by Close; false once closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer p.untrack(c)
			p.handle(c)
		}()
	}
}

// handle answers one CONNECT: checks the name, resolves it, refuses any
// internal address, dials the checked address itself (never the name
// again, so a second resolution cannot change the answer) and splices.
func (p *Proxy) handle(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(headerTimeout))
	br := bufio.NewReaderSize(io.LimitReader(c, maxHeader), 1024)
	req, err := http.ReadRequest(br)
	if err != nil {
		reply(c, http.StatusBadRequest, "bad proxy request")
		return
	}
	if req.Method != http.MethodConnect {
		reply(c, http.StatusMethodNotAllowed, "only CONNECT is served (use HTTPS)")
		return
	}
	host, portText, err := net.SplitHostPort(req.RequestURI)
	port, perr := strconv.Atoi(portText)
	if err != nil || perr != nil {
		reply(c, http.StatusBadRequest, "CONNECT needs host:port")
		return
	}
	decide := func(d Decision) {
		if p.log != nil {
			d.Host, d.Port = host, port
			p.log(d)
		}
	}
	refuse := func(status int, addr netip.AddrPort, why string) {
		decide(Decision{Address: addr, Reason: why})
		reply(c, status, why)
	}
	if why := p.rules.Check(host, port); why != "" {
		refuse(http.StatusForbidden, netip.AddrPort{}, why)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	addrs, err := p.resolve(ctx, host)
	if err != nil || len(addrs) == 0 {
		refuse(http.StatusBadGateway, netip.AddrPort{}, "cannot resolve the host")
		return
	}
	for _, a := range addrs {
		if Internal(a) {
			refuse(http.StatusForbidden, netip.AddrPortFrom(a.Unmap(), uint16(port)),
				fmt.Sprintf("the host resolves to an internal address (%s)", a))
			return
		}
	}
	target := netip.AddrPortFrom(addrs[0].Unmap(), uint16(port))
	up, err := p.dial(ctx, target)
	if err != nil {
		refuse(http.StatusBadGateway, target, "cannot connect to the host")
		return
	}
	if !p.track(up) {
		return
	}
	defer p.untrack(up)
	decide(Decision{Address: target, Allowed: true})
	_ = c.SetReadDeadline(time.Time{})
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	splice(c, up, br)
}

// splice copies both ways until either side ends, then cuts both.
func splice(client, up net.Conn, buffered *bufio.Reader) {
	done := make(chan struct{}, 2)
	go func() {
		// Bytes the client sent after its request are in the reader.
		if n := buffered.Buffered(); n > 0 {
			b, _ := buffered.Peek(n)
			_, _ = up.Write(b)
		}
		_, _ = io.Copy(up, client)
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(client, up)
		done <- struct{}{}
	}()
	<-done
	client.Close()
	up.Close()
	<-done
}

func reply(c net.Conn, status int, why string) {
	_, _ = fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s\n",
		status, http.StatusText(status), len(why)+1, why)
}
