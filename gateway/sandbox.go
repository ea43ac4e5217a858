package gateway

import (
	"context"

	"github.com/mcp-warden/mcp-warden/sandbox"
)

// spawn starts a stdio server confined, through the gateway's pool of
// waiting sandbox inits (nil before Start: a cold start), with each egress
// decision of its proxy in the gateway's log.
func (g *Gateway) spawn(ctx context.Context, spec sandbox.Spec) (*sandbox.Process, error) {
	spec.EgressLog = g.logEgress
	return g.pool.Spawn(ctx, spec)
}

// logEgress records one answer of a server's egress proxy: allowed at info,
// refused at warning with the reason. Host names and addresses only: the
// proxy never sees what travels inside the TLS connection.
func (g *Gateway) logEgress(d sandbox.EgressDecision) {
	attrs := []any{"server", d.Server, "host", d.Host, "port", d.Port, "address", d.Address}
	if d.Allowed {
		g.logger.Info("egress allowed", attrs...)
		return
	}
	g.logger.Warn("egress refused", append(attrs, "reason", d.Reason)...)
}

// hasStdioServer reports whether cfg starts any server as a process.
func hasStdioServer(cfg *Config) bool {
	for _, sc := range cfg.Servers {
		if sc.URL == "" {
			return true
		}
	}
	return false
}
