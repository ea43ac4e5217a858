package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/http/httpproxy"
)

// This file holds what protects the gateway's network from remote server
// entries: the addresses a remote upstream may not reach unless its entry
// allows it (SSRF), checked on the URL at validation and on every address
// actually dialled (a name may resolve, or re-resolve, anywhere).

// BlockedAddressError is the start error of a remote server whose URL
// reached an address remote servers are refused.
type BlockedAddressError struct {
	// Server is the configured server name.
	Server string
	// Address is the address dialled (ip:port).
	Address string
	// Why names the kind of address, e.g. "a loopback address".
	Why string
}

// Error names the server, the address and the fix.
func (e *BlockedAddressError) Error() string {
	return fmt.Sprintf("server %q: %s is %s, where remote servers are refused (SSRF); set allow_private_network: true on the server if it is yours",
		e.Server, e.Address, e.Why)
}

// sharedAddressSpace is RFC 6598's carrier-grade NAT range, which also
// holds some clouds' metadata services (100.100.100.200).
var sharedAddressSpace = netip.MustParsePrefix("100.64.0.0/10")

// thisNetwork is 0.0.0.0/8, which Linux connects to the local host.
var thisNetwork = netip.MustParsePrefix("0.0.0.0/8")

// blockedAddr says why remote servers may not be reached at a, or "".
func blockedAddr(a netip.Addr) string {
	a = a.Unmap()
	switch {
	case a.IsLoopback():
		return "a loopback address"
	case a == netip.AddrFrom4([4]byte{169, 254, 169, 254}) || a == netip.MustParseAddr("fd00:ec2::254"):
		return "a cloud metadata address"
	case a.IsLinkLocalUnicast(), a.IsLinkLocalMulticast():
		return "a link-local address"
	case a.IsPrivate():
		return "a private address"
	case sharedAddressSpace.Contains(a):
		return "a shared (carrier-grade NAT) address"
	case a.IsUnspecified() || thisNetwork.Contains(a):
		return "an unspecified address"
	case a.IsMulticast():
		return "a multicast address"
	}
	return ""
}

// blockedHost says why a URL's host may not be reached, for the hosts that
// can be told without resolving them (IP literals and localhost), or "".
func blockedHost(host string) string {
	if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") || strings.HasSuffix(strings.ToLower(strings.TrimSuffix(host, ".")), ".localhost") {
		return "localhost"
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return a.String() + ", " + blockedAddr(a)
	}
	return ""
}

// Proxy settings of remote servers (ServerConfig.Proxy, Config.RemoteProxy)
// besides a proxy URL.
const (
	// ProxyNone connects to the server directly, whatever the environment
	// says: the default.
	ProxyNone = "none"
	// ProxyEnvironment goes through the proxy HTTPS_PROXY or HTTP_PROXY
	// (or their lower-case forms) names for the server's URL, unless
	// NO_PROXY exempts it, read when the gateway is created. Loopback
	// hosts are never proxied.
	ProxyEnvironment = "environment"
)

// remoteProxy is how one remote server is reached through a proxy.
type remoteProxy struct {
	// choose is the transport's Proxy: the proxy for a request, nil for
	// none (a direct connection).
	choose func(*http.Request) (*url.URL, error)
	// addrs are the host:port of every proxy choose may return, the
	// addresses the dialer connects to for a proxied request.
	addrs map[string]bool
	// shown is the setting as it may be logged: no password.
	shown string
	// password is the password of a proxy URL, for redaction ("" if none).
	password string
}

// newRemoteProxy reads a proxy setting: ProxyNone (nil, no proxy),
// ProxyEnvironment, or an http(s) proxy URL. Errors never hold a password.
func newRemoteProxy(setting string) (*remoteProxy, error) {
	switch setting {
	case "", ProxyNone:
		return nil, nil
	case ProxyEnvironment:
		env := httpproxy.FromEnvironment()
		p := &remoteProxy{addrs: map[string]bool{}, shown: ProxyEnvironment}
		for _, v := range []string{env.HTTPProxy, env.HTTPSProxy} {
			if v == "" {
				continue
			}
			if !strings.Contains(v, "://") {
				v = "http://" + v // as Go reads the variables
			}
			u, err := parseProxyURL(v)
			if err != nil {
				return nil, fmt.Errorf("proxy from the environment: %w", err)
			}
			p.addrs[proxyAddr(u)] = true
			if pw, ok := u.User.Password(); ok && pw != "" {
				p.password = pw
			}
		}
		choose := env.ProxyFunc()
		p.choose = func(r *http.Request) (*url.URL, error) { return choose(r.URL) }
		return p, nil
	}
	u, err := parseProxyURL(setting)
	if err != nil {
		return nil, err
	}
	p := &remoteProxy{addrs: map[string]bool{proxyAddr(u): true}, shown: u.Redacted(), choose: http.ProxyURL(u)}
	if pw, ok := u.User.Password(); ok {
		p.password = pw
	}
	return p, nil
}

// parseProxyURL reads an http(s) proxy URL.
func parseProxyURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		// url.Parse's error quotes the input, password and all.
		return nil, fmt.Errorf("not a proxy URL")
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("%s: the proxy scheme must be http or https", u.Redacted())
	case u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "":
		return nil, fmt.Errorf("%s: a proxy URL is scheme://[user:password@]host:port and nothing more", u.Redacted())
	}
	return u, nil
}

// proxyAddr is the address Go's transport dials for proxy u (its
// canonicalAddr): host:port, the port defaulting by scheme.
func proxyAddr(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// remoteHTTPClient is the HTTP client of one remote server: its own
// connections (nothing shared with other servers or the process), the
// configured headers on every request, the server's proxy if it has one
// (nil: none; the environment is never read here), and, unless the entry
// allows it, no connection to an address blockedAddr refuses.
//
// Through a proxy the gateway neither resolves nor connects to the server:
// the proxy does. The proxy's own address is the operator's choice and is
// not checked; the server's host is checked on every request (redirects
// too) when it is an address or localhost, and a name is the proxy's to
// resolve and to refuse. A request the proxy does not take (NO_PROXY) is
// dialled directly and checked as always.
func remoteHTTPClient(sc ServerConfig, headers map[string]string, proxy *remoteProxy, roots *x509.CertPool) *http.Client {
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.Proxy = nil // the default reads the environment: inherit nothing
	if roots != nil {
		base.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	}
	direct := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	checked := direct
	if !sc.AllowPrivateNetwork {
		checked = &net.Dialer{Timeout: direct.Timeout, KeepAlive: direct.KeepAlive}
		// Control runs on the address about to be connected, after
		// resolution: no name can sneak a blocked address past it.
		checked.Control = func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("server %q: unexpected address %q: %w", sc.Name, address, err)
			}
			if why := blockedAddr(ap.Addr()); why != "" {
				return &BlockedAddressError{Server: sc.Name, Address: address, Why: why}
			}
			return nil
		}
	}
	base.DialContext = checked.DialContext
	if proxy != nil {
		base.Proxy = func(r *http.Request) (*url.URL, error) {
			p, err := proxy.choose(r)
			if err != nil || p == nil || sc.AllowPrivateNetwork {
				return p, err
			}
			if why := blockedTarget(r.URL.Hostname()); why != "" {
				return nil, &BlockedAddressError{Server: sc.Name, Address: r.URL.Host, Why: why}
			}
			return p, nil
		}
		base.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if proxy.addrs[addr] {
				return direct.DialContext(ctx, network, addr)
			}
			return checked.DialContext(ctx, network, addr)
		}
	}
	return &http.Client{Transport: headerTransport{headers: headers, next: base}}
}

// blockedTarget says why remote servers may not be reached at host, when
// that can be told without resolving it (an address or localhost), or "".
func blockedTarget(host string) string {
	if a, err := netip.ParseAddr(host); err == nil {
		return blockedAddr(a)
	}
	if blockedHost(host) != "" {
		return "a loopback address (localhost)"
	}
	return ""
}

// headerTransport adds the configured headers to every request to a remote
// server. Nothing of the downstream request is copied.
type headerTransport struct {
	headers map[string]string
	next    http.RoundTripper
}

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if len(t.headers) > 0 {
		r = r.Clone(r.Context())
		for k, v := range t.headers {
			r.Header.Set(k, v)
		}
	}
	return t.next.RoundTrip(r)
}

// hasHeader reports whether headers sets name (case-insensitively, as HTTP
// reads header names).
func hasHeader(headers map[string]string, name string) bool {
	for k := range headers {
		if strings.EqualFold(k, name) {
			return true
		}
	}
	return false
}

// loadCAFile reads the PEM CA certificates of a remote server's ca_file.
func loadCAFile(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	cas, err := parseCertificates(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(cas) == 0 {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	pool := x509.NewCertPool()
	for _, ca := range cas {
		pool.AddCert(ca)
	}
	return pool, nil
}
