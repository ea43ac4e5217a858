// Package egress is the gateway's side of a server's network egress: an
// HTTP CONNECT proxy that lets a server reach only the host names its
// profile allows, and never an address inside the host's own networks.
package egress

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// DefaultPort is the only port a pattern without ":port" allows.
const DefaultPort = 443

// Pattern is one parsed allow or deny entry: "host", "*.domain" (strict
// subdomains only) or either with ":port".
type Pattern struct {
	Host     string // lower case, without the "*." of a wildcard
	Wildcard bool
	Port     int // 0: DefaultPort for an allow entry, any port for a deny entry
}

// ParsePattern parses one entry and says what is wrong with a bad one.
func ParsePattern(s string) (Pattern, error) {
	host, port := s, 0
	if h, p, ok := strings.Cut(s, ":"); ok {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return Pattern{}, fmt.Errorf("%q: the port must be a number from 1 to 65535", s)
		}
		host, port = h, n
	}
	host = strings.ToLower(host)
	var p Pattern
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		p.Wildcard, host = true, rest
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return Pattern{}, fmt.Errorf("%q: IP addresses are not allowed, name the host", s)
	}
	if !validHostName(host) || !strings.Contains(host, ".") && p.Wildcard {
		return Pattern{}, fmt.Errorf(`%q: not a host name (use "api.example.com" or "*.example.com", optionally with ":port")`, s)
	}
	p.Host, p.Port = host, port
	return p, nil
}

// validHostName accepts DNS names of letters, digits and hyphens.
func validHostName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
				return false
			}
		}
	}
	return true
}

// matchHost: an exact name matches itself only; "*.x" matches every name
// ending in ".x" but not "x" itself.
func (p Pattern) matchHost(host string) bool {
	if p.Wildcard {
		return strings.HasSuffix(host, "."+p.Host)
	}
	return host == p.Host
}

// Rules decide which host:port a server may connect to. Denies win.
type Rules struct {
	Allow, Deny []Pattern
}

// ParseRules parses allow and deny entries.
func ParseRules(allow, deny []string) (Rules, error) {
	var r Rules
	for _, s := range allow {
		p, err := ParsePattern(s)
		if err != nil {
			return Rules{}, err
		}
		r.Allow = append(r.Allow, p)
	}
	for _, s := range deny {
		p, err := ParsePattern(s)
		if err != nil {
			return Rules{}, err
		}
		r.Deny = append(r.Deny, p)
	}
	return r, nil
}

// Check says why host:port is refused, or "" if it is allowed. host must be
// a name: IP literals are refused, so that only names reach the allowlist.
func (r Rules) Check(host string, port int) string {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if _, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return "IP addresses are refused; connect by host name"
	}
	if !validHostName(host) {
		return "not a host name"
	}
	for _, d := range r.Deny {
		if d.matchHost(host) && (d.Port == 0 || d.Port == port) {
			return "host denied"
		}
	}
	for _, a := range r.Allow {
		want := a.Port
		if want == 0 {
			want = DefaultPort
		}
		if a.matchHost(host) && port == want {
			return ""
		}
	}
	return "host and port not in the allowlist"
}

// internalPrefixes are the ranges an allowed name must not resolve to:
// the host itself, private and shared networks, link-local (cloud metadata
// at 169.254.169.254), and IPv6 forms that embed such IPv4 addresses.
var internalPrefixes = func() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8",      // "this network"
		"100.64.0.0/10",  // carrier-grade NAT (RFC 6598)
		"192.0.0.0/24",   // IETF protocol assignments
		"198.18.0.0/15",  // benchmarking
		"240.0.0.0/4",    // reserved, broadcast
		"64:ff9b::/96",   // NAT64: reaches IPv4 through a translator
		"64:ff9b:1::/48", // local-use NAT64
		"2002::/16",      // 6to4: embeds an IPv4 address
		"fec0::/10",      // deprecated site-local
		"100::/64",       // discard-only
		"2001:db8::/32",  // documentation
		"::/128",         // unspecified
		"::ffff:0:0/96",  // IPv4-mapped (checked unmapped too)
		"fd00:ec2::/32",  // AWS IPv6 metadata (inside fc00::/7 already)
		"169.254.0.0/16", // link-local, metadata
		"fe80::/10",      // link-local
		"10.0.0.0/8",     // RFC 1918
		"172.16.0.0/12",  // RFC 1918
		"192.168.0.0/16", // RFC 1918
		"fc00::/7",       // unique local
		"127.0.0.0/8",    // loopback
		"::1/128",        // loopback
		"224.0.0.0/4",    // multicast
		"ff00::/8",       // multicast
		"255.255.255.255/32",
	} {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}()

// Internal reports whether a is an address no server may reach through the
// proxy, whatever name resolved to it.
func Internal(a netip.Addr) bool {
	for _, x := range []netip.Addr{a, a.Unmap()} {
		for _, p := range internalPrefixes {
			if p.Contains(x) {
				return true
			}
		}
	}
	return false
}
