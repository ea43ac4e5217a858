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

// Run serves the configured listeners until ctx ends, one of them fails, or
// the stdio client disconnects; then it shuts the HTTP listeners down,
// letting in-flight requests finish for up to ten seconds. Clients that
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
		mux := http.NewServeMux()
		g.auth.mount(mux, "/mcp", g.HTTPHandler(principal))
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
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
