package gateway

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// sessionCalls holds the cancel functions of the requests in flight in each
// downstream HTTP session, so that a session's end cancels them upstream.
//
// A request's own cancellation (notifications/cancelled, a closed 2026-07-28
// stream, a stdio client gone) reaches the handler's context and from there
// the upstream through the SDK. The end of a legacy HTTP session does not:
// the SDK closes a session only after its requests finish, so a DELETE
// would wait for calls nobody will read (see RATIONALE.md, "Cancellation").
type sessionCalls struct {
	mu       sync.Mutex
	next     uint64
	sessions map[string]*sessionInflight
}

type sessionInflight struct {
	user    string // the TokenInfo user the session is bound to ("" without authentication)
	cancels map[uint64]context.CancelFunc
}

// track returns ctx, cancelled when the session ends, and the func that
// forgets the request once it is answered. Requests outside an HTTP session
// (stdio, stateless) are not tracked.
func (s *sessionCalls) track(ctx context.Context, req mcp.Request) (context.Context, func()) {
	ss, ok := req.GetSession().(*mcp.ServerSession)
	if !ok || ss == nil || ss.ID() == "" {
		return ctx, func() {}
	}
	id, user := ss.ID(), ""
	if extra := req.GetExtra(); extra != nil && extra.TokenInfo != nil {
		user = extra.TokenInfo.UserID
	}
	ctx, cancel := context.WithCancel(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sessions == nil {
		s.sessions = map[string]*sessionInflight{}
	}
	in := s.sessions[id]
	if in == nil {
		in = &sessionInflight{user: user, cancels: map[uint64]context.CancelFunc{}}
		s.sessions[id] = in
	}
	s.next++
	n := s.next
	in.cancels[n] = cancel
	return ctx, func() {
		cancel()
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(in.cancels, n)
		if len(in.cancels) == 0 && s.sessions[id] == in {
			delete(s.sessions, id)
		}
	}
}

// end cancels the requests in flight in session id, when user is the one
// the session is bound to (a DELETE from anyone else is refused by the SDK
// and must not cancel anything either).
func (s *sessionCalls) end(id, user string) {
	s.mu.Lock()
	in := s.sessions[id]
	if in == nil || in.user != user {
		s.mu.Unlock()
		return
	}
	delete(s.sessions, id)
	// The requests' own done funcs delete from cancels under s.mu.
	cancels := slices.Collect(maps.Values(in.cancels))
	s.mu.Unlock()
	for _, cancel := range cancels {
		cancel()
	}
}

// endingSessions cancels a legacy session's requests in flight before h
// (the SDK's handler) ends the session on a DELETE.
func (s *sessionCalls) endingSessions(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id := r.Header.Get("Mcp-Session-Id"); r.Method == http.MethodDelete && id != "" {
			user := ""
			if ti := auth.TokenInfoFromContext(r.Context()); ti != nil {
				user = ti.UserID
			}
			s.end(id, user)
		}
		h.ServeHTTP(w, r)
	})
}
