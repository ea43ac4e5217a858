package egress

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRulesCheck(t *testing.T) {
	r, err := ParseRules([]string{"api.github.com", "*.example.com", "Git.Corp.test:8443"}, []string{"secret.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		host string
		port int
		ok   bool
	}{
		{"api.github.com", 443, true},
		{"API.GitHub.com.", 443, true}, // case and a trailing dot change nothing
		{"api.github.com", 80, false},  // other ports only when listed
		{"github.com", 443, false},
		{"evil-api.github.com", 443, false},
		{"api.github.com.evil.test", 443, false},
		{"evilapi.github.com", 443, false},
		{"www.example.com", 443, true},
		{"a.b.example.com", 443, true},
		{"example.com", 443, false}, // *.x is not x
		{"badexample.com", 443, false},
		{"secret.example.com", 443, false}, // deny wins
		{"git.corp.test", 8443, true},
		{"git.corp.test", 443, false},
		{"1.2.3.4", 443, false},
		{"::1", 443, false},
		{"[::1]", 443, false},
		{"", 443, false},
		{"a b.example.com", 443, false},
	} {
		why := r.Check(c.host, c.port)
		if (why == "") != c.ok {
			t.Errorf("%s:%d: refused %q, want allowed %v", c.host, c.port, why, c.ok)
		}
	}
}

func TestParsePatternRefusesBadEntries(t *testing.T) {
	for _, s := range []string{"", "*", "*.com.", "http://x.test", "10.0.0.1", "x.test:0", "x.test:99999", "x.test:https", "a..b", "*.", "-a.test", "x_y.test"} {
		if _, err := ParsePattern(s); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
}

func TestInternal(t *testing.T) {
	for _, a := range []string{"127.0.0.1", "127.8.9.10", "10.1.2.3", "172.16.0.1", "172.31.255.255", "192.168.1.1",
		"169.254.169.254", "100.64.0.1", "100.127.255.255", "0.0.0.0", "255.255.255.255", "224.0.0.1",
		"::1", "::", "fe80::1", "fc00::1", "fd00:ec2::254", "::ffff:127.0.0.1", "::ffff:10.0.0.1", "64:ff9b::a00:1", "2002:a00:1::1"} {
		if !Internal(netip.MustParseAddr(a)) {
			t.Errorf("%s is not internal", a)
		}
	}
	for _, a := range []string{"8.8.8.8", "140.82.112.3", "172.32.0.1", "100.128.0.1", "2606:4700::1111"} {
		if Internal(netip.MustParseAddr(a)) {
			t.Errorf("%s is internal", a)
		}
	}
}

// connect sends one CONNECT through the proxy at addr and returns the
// status line.
func connect(t *testing.T, addr, target string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.Status
}

// The real resolver: an allowed name that resolves to loopback is refused,
// and nothing is dialed.
func TestProxyRefusesLoopbackAfterRealResolution(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r, _ := ParseRules([]string{"localhost"}, nil)
	var dialed atomic.Bool
	p := Serve(l, r, SystemResolver, func(ctx context.Context, a netip.AddrPort) (net.Conn, error) {
		dialed.Store(true)
		return nil, fmt.Errorf("no")
	}, nil)
	defer p.Close()
	if st := connect(t, l.Addr().String(), "localhost:443"); !strings.HasPrefix(st, "403") {
		t.Errorf("localhost: %s", st)
	}
	if st := connect(t, l.Addr().String(), "elsewhere.test:443"); !strings.HasPrefix(st, "403") {
		t.Errorf("unlisted: %s", st)
	}
	if dialed.Load() {
		t.Error("the proxy dialed")
	}
}
