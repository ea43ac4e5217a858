package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-warden/mcp-warden/policy"
)

// Run serves the configured listeners until ctx ends, one of them fails, or
// the stdio client disconnects; then it shuts the HTTP listeners down:
// no new connections, in-flight requests finish (for up to ten seconds),
// then open streams are closed. Clients that
// present no credentials act as the configured principal. Run does not
// Close the gateway.
func (g *Gateway) Run(ctx context.Context) error {
	listeners := g.cfg.Listeners
	principal := policy.Principal{ID: g.cfg.Principal.ID, Claims: g.cfg.Principal.Claims}
	logger := g.logger
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, len(listeners))
	var servers []*http.Server
	for _, l := range listeners {
		if l.Stdio {
			go func() { done <- g.Serve(ctx, &mcp.StdioTransport{}, principal) }()
			continue
		}
		ln, err := net.Listen("tcp", l.HTTP)
		if err != nil {
			return fmt.Errorf("listen %s: %w", l.HTTP, err)
		}
		srv := newHTTPServer(g.HTTPHandler(principal, HTTPOptions{AllowedOrigins: l.AllowedOrigins}))
		servers = append(servers, srv)
		logger.Info("serving streamable HTTP", "url", "http://"+ln.Addr().String()+"/mcp")
		go func() {
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				done <- err
				return
			}
			done <- nil
		}()
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-done:
	}
	cancel()
	g.shutdownHTTP(servers)
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// shutdownHTTP stops accepting, lets in-flight requests finish within
// shutdownGrace, then closes what is left (idle SSE streams, which never
// finish on their own).
func (g *Gateway) shutdownHTTP(servers []*http.Server) {
	ctx, stop := context.WithTimeout(context.Background(), shutdownGrace)
	defer stop()
	var wg sync.WaitGroup
	for _, srv := range servers {
		wg.Go(func() { _ = srv.Shutdown(ctx) })
	}
	g.inflight.wait(ctx)
	for _, srv := range servers {
		_ = srv.Close()
	}
	wg.Wait()
	g.closeDownstreamSessions()
}
