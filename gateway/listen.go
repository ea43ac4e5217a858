package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"

	"github.com/mcp-warden/mcp-warden/policy"
)

// Run serves the configured listeners (and /metrics, if configured) until
// ctx ends, one of them fails, or the stdio client disconnects; then it
// shuts the HTTP listeners down: no new connections, in-flight requests
// finish (for up to ten seconds), then open streams are closed. Clients
// that present no credentials act as the configured principal. Run does
// not Close the gateway.
func (g *Gateway) Run(ctx context.Context) error {
	principal := policy.Principal{ID: g.cfg.Principal.ID, Claims: g.cfg.Principal.Claims}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, len(g.cfg.Listeners)+1)
	var servers []*http.Server
	serve := func(addr string, tlsCfg *ListenerTLSConfig, handler http.Handler, what, path string) error {
		srv := newHTTPServer(handler)
		srv.ErrorLog = g.httpErrorLog(addr)
		scheme := "http"
		if tlsCfg != nil {
			c, err := tlsCfg.TLSConfig()
			if err != nil {
				return fmt.Errorf("listener %s: %w", addr, err)
			}
			srv.TLSConfig, scheme = c, "https"
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("listen %s: %w", addr, err)
		}
		servers = append(servers, srv)
		g.logger.Info("serving "+what, "url", scheme+"://"+ln.Addr().String()+path, "client_certificates", clientCertMode(tlsCfg))
		go func() {
			var err error
			if srv.TLSConfig != nil {
				// ServeTLS offers HTTP/2 as well as HTTP/1.1 (ALPN); the
				// certificates are in TLSConfig already.
				err = srv.ServeTLS(ln, "", "")
			} else {
				err = srv.Serve(ln)
			}
			if !errors.Is(err, http.ErrServerClosed) {
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
				go func() { done <- g.Serve(ctx, StdioTransport(), principal) }()
				continue
			}
			opts := HTTPOptions{AllowedOrigins: l.AllowedOrigins}
			if l.HTTP == metricsAddr {
				// On a client-facing listener, metrics need the same
				// credentials as MCP: server names are not for everyone.
				opts.Metrics, metricsAddr = true, ""
			}
			if err := serve(l.HTTP, l.TLS, g.HTTPHandler(principal, opts), "streamable HTTP", "/mcp"); err != nil {
				return err
			}
		}
		if metricsAddr != "" {
			mux := http.NewServeMux()
			mux.Handle("/metrics", g.MetricsHandler())
			return serve(metricsAddr, nil, mux, "metrics", "/metrics")
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
	// No retry can arrive for a call held for a client's input any more.
	g.inputs.cancelParked()
	g.inflight.wait(ctx)
	for _, srv := range servers {
		_ = srv.Close()
	}
	wg.Wait()
	g.closeDownstreamSessions()
}

// clientCertMode says, for the start-up log, what a listener asks of
// client certificates.
func clientCertMode(t *ListenerTLSConfig) string {
	switch {
	case t == nil || t.ClientCAFile == "":
		return "none"
	case t.RequireClientCert:
		return "required"
	default:
		return "optional"
	}
}
