package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-warden/mcp-warden/policy"
)

// Run serves the configured listeners (and /metrics, if configured) until
// ctx ends, one of them fails, or the stdio client disconnects; then it
// shuts the HTTP listeners down, letting in-flight requests finish for up
// to ten seconds. Clients that present no credentials act as the
// configured principal. Run does not Close the gateway.
func (g *Gateway) Run(ctx context.Context) error {
	principal := policy.Principal{ID: g.cfg.Principal.ID, Claims: g.cfg.Principal.Claims}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, len(g.cfg.Listeners)+1)
	var servers []*http.Server
	serve := func(addr string, mux *http.ServeMux, what, path string) error {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("listen %s: %w", addr, err)
		}
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
		servers = append(servers, srv)
		g.logger.Info("serving "+what, "url", "http://"+ln.Addr().String()+path)
		go func() {
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				done <- err
				return
			}
			done <- nil
		}()
		return nil
	}

	err := func() error {
		metricsAddr := g.cfg.Metrics.HTTP
		for _, l := range g.cfg.Listeners {
			if l.Stdio {
				go func() { done <- g.Serve(ctx, &mcp.StdioTransport{}, principal) }()
				continue
			}
			mux := http.NewServeMux()
			g.auth.mount(mux, "/mcp", g.HTTPHandler(principal))
			if l.HTTP == metricsAddr {
				// On a client-facing listener, metrics need the same
				// credentials as MCP: server names are not for everyone.
				mux.Handle("/metrics", g.auth.protectIfEnabled(g.MetricsHandler()))
				metricsAddr = ""
			}
			if err := serve(l.HTTP, mux, "streamable HTTP", "/mcp"); err != nil {
				return err
			}
		}
		if metricsAddr != "" {
			mux := http.NewServeMux()
			mux.Handle("/metrics", g.MetricsHandler())
			return serve(metricsAddr, mux, "metrics", "/metrics")
		}
		return nil
	}()
	if err == nil {
		select {
		case <-ctx.Done():
		case err = <-done:
		}
	}
	cancel()
	shutdownCtx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	for _, srv := range servers {
		_ = srv.Shutdown(shutdownCtx)
	}
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}
