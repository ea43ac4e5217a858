package gateway

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"time"
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

// remoteHTTPClient is the HTTP client of one remote server: its own
// connections (nothing shared with other servers or the process), the
// configured headers on every request, and, unless the entry allows it, no
// connection to an address blockedAddr refuses.
func remoteHTTPClient(sc ServerConfig, headers map[string]string) *http.Client {
	base := http.DefaultTransport.(*http.Transport).Clone()
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	if !sc.AllowPrivateNetwork {
		// Control runs on the address about to be connected, after
		// resolution: no name can sneak a blocked address past it.
		dialer.Control = func(_, address string, _ syscall.RawConn) error {
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
	base.DialContext = dialer.DialContext
	return &http.Client{Transport: headerTransport{headers: headers, next: base}}
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
