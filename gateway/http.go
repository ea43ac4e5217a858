package gateway

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// Limits of the HTTP face. Every read and every write has a deadline, so a
// client that stalls cannot hold a connection (and its goroutines) forever,
// while long-lived SSE streams stay open as long as they make progress.
const (
	// maxRequestBytes bounds a request body; larger bodies get 413.
	maxRequestBytes = 4 << 20
	// maxHeaderBytes bounds the request line and headers.
	maxHeaderBytes = 64 << 10
	// readHeaderTimeout bounds reading a request's headers.
	readHeaderTimeout = 10 * time.Second
	// bodyReadTimeout bounds reading a request's body.
	bodyReadTimeout = 30 * time.Second
	// writeTimeout bounds each write (and flush) of a response.
	writeTimeout = 30 * time.Second
	// idleTimeout closes keep-alive connections left idle.
	idleTimeout = 2 * time.Minute
	// shutdownGrace is how long Run lets in-flight requests finish.
	shutdownGrace = 10 * time.Second
)

// HTTPOptions adjusts the HTTP face returned by Gateway.HTTPHandler.
type HTTPOptions struct {
	// AllowedOrigins are the browser origins (scheme://host[:port]) allowed
	// besides same-origin requests and, on a loopback listener, loopback
	// origins. A request with any other Origin header gets 403.
	AllowedOrigins []string
	// Metrics serves the Prometheus metrics at /metrics, behind the same
	// checks and authentication as the rest of the face.
	Metrics bool
}

// httpHygiene wraps next with the checks every request to the HTTP face
// passes before anything else: the Host and Origin checks that defeat DNS
// rebinding and cross-site requests (403), the body size limit (413), and
// per-read and per-write deadlines.
func httpHygiene(next http.Handler, allowedOrigins []string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		loopback := isLoopbackListener(r)
		if loopback && !isLoopbackHost(r.Host) {
			http.Error(w, "forbidden: the Host header must name the loopback address this gateway listens on", http.StatusForbidden)
			return
		}
		if origin := r.Header.Get("Origin"); origin != "" && !originAllowed(origin, r.Host, loopback, allowedOrigins) {
			http.Error(w, "forbidden: cross-origin request from "+origin, http.StatusForbidden)
			return
		}
		ctl := http.NewResponseController(w)
		dw := &deadlineWriter{ResponseWriter: w, ctl: ctl}
		if r.Body != nil && r.Body != http.NoBody {
			_ = ctl.SetReadDeadline(time.Now().Add(bodyReadTimeout))
			dw.body = &deadlineBody{ReadCloser: http.MaxBytesReader(w, r.Body, maxRequestBytes), ctl: ctl}
			r.Body = dw.body
		}
		next.ServeHTTP(dw, r)
	})
}

// isLoopbackListener reports whether r arrived on a loopback address.
func isLoopbackListener(r *http.Request) bool {
	addr, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return false
	}
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// isLoopbackHost reports whether a Host header (host[:port]) names the
// loopback interface.
func isLoopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func originAllowed(origin, host string, loopback bool, allowed []string) bool {
	if slices.Contains(allowed, origin) {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	if strings.EqualFold(u.Host, host) {
		return true // same origin; a rebound name is caught by the Host check
	}
	return loopback && isLoopbackHost(u.Host)
}

// deadlineWriter sets a write deadline before every write and flush. The
// first write also lifts the body's read deadline: by then the body is read,
// and a deadline left behind would cancel the request of a long SSE stream.
type deadlineWriter struct {
	http.ResponseWriter
	ctl  *http.ResponseController
	body *deadlineBody
}

func (w *deadlineWriter) arm() {
	if w.body != nil {
		w.body.done()
	}
	_ = w.ctl.SetWriteDeadline(time.Now().Add(writeTimeout))
}

func (w *deadlineWriter) WriteHeader(code int) {
	w.arm()
	w.ResponseWriter.WriteHeader(code)
}

func (w *deadlineWriter) Write(p []byte) (int, error) {
	w.arm()
	return w.ResponseWriter.Write(p)
}

// Flush implements http.Flusher, which SSE streaming needs.
func (w *deadlineWriter) Flush() {
	w.arm()
	_ = w.ctl.Flush()
}

// Unwrap lets http.ResponseController reach the connection.
func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// deadlineBody lifts the read deadline once the body is consumed.
type deadlineBody struct {
	io.ReadCloser
	ctl  *http.ResponseController
	once sync.Once
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		b.done()
	}
	return n, err
}

func (b *deadlineBody) Close() error {
	b.done()
	return b.ReadCloser.Close()
}

func (b *deadlineBody) done() {
	b.once.Do(func() { _ = b.ctl.SetReadDeadline(time.Time{}) })
}

// newHTTPServer is the http.Server for a listener, with every timeout set.
func newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
	}
}
