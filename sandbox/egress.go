package sandbox

import (
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/mcp-warden/mcp-warden/sandbox/internal/egress"
)

// Where the proxy resolves and connects (replaced by tests).
var (
	egressResolve egress.Resolver = egress.SystemResolver
	egressDial    egress.Dialer   = egress.SystemDialer
)

// proxyVariables point HTTP clients at the egress proxy; they replace any
// declared ones.
var proxyVariables = []string{"HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"}

// withProxyVariables returns env with the proxy variables set.
func withProxyVariables(env []string) []string {
	out := slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.Contains(proxyVariables, k) || strings.EqualFold(k, "NO_PROXY")
	})
	for _, k := range proxyVariables {
		out = append(out, k+"=http://"+EgressProxyAddr)
	}
	return out
}

// egressHandover is the gateway's end of the socket over which the init
// hands over the proxy's listening socket, and the init's end (fd 5).
type egressHandover struct {
	gateway, init *os.File
}

func newEgressHandover() (*egressHandover, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("egress proxy: %w", err)
	}
	return &egressHandover{gateway: os.NewFile(uintptr(fds[0]), "egress"), init: os.NewFile(uintptr(fds[1]), "egress-init")}, nil
}

func (h *egressHandover) Close() {
	if h != nil {
		h.gateway.Close()
		h.init.Close()
	}
}

// startProxy receives the listener the init sent before it reported
// Started, and serves the proxy on it with prof's rules.
func (h *egressHandover) startProxy(prof Profile, spec Spec) (*egress.Proxy, error) {
	buf, oob := make([]byte, 1), make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := unix.Recvmsg(int(h.gateway.Fd()), buf, oob, unix.MSG_DONTWAIT|unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("egress proxy: no listener from the init: %w", err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return nil, errors.New("egress proxy: no listener from the init")
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		return nil, errors.New("egress proxy: no listener from the init")
	}
	f := os.NewFile(uintptr(fds[0]), "egress-listener")
	defer f.Close() // FileListener dups it
	l, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("egress proxy: %w", err)
	}
	rules, err := egress.ParseRules(prof.Egress.Allow, prof.Egress.Deny)
	if err != nil { // Validate parsed them already
		l.Close()
		return nil, err
	}
	var log func(egress.Decision)
	if spec.EgressLog != nil {
		log = func(d egress.Decision) {
			e := EgressDecision{Server: spec.Name, Host: d.Host, Port: d.Port, Allowed: d.Allowed, Reason: d.Reason}
			if d.Address.IsValid() {
				e.Address = d.Address.String()
			}
			spec.EgressLog(e)
		}
	}
	return egress.Serve(l, rules, egressResolve, egressDial, log), nil
}

// EgressDecision is one answer of a server's egress proxy (see
// Profile.Egress) to a CONNECT request.
type EgressDecision struct {
	Server  string // Spec.Name
	Host    string // the host name the server asked for
	Port    int
	Address string // "ip:port" connected to or refused; "" when refused before resolution
	Allowed bool
	Reason  string // why it was refused; "" when allowed
}
