package policy

// Entrypoint is the one rule every decision is read from.
const Entrypoint = "data.mcp.warden.decision"

// EntrypointPath is Entrypoint in the slash form OPA's decision-log events
// use for "path".
const EntrypointPath = "mcp/warden/decision"

// Decision is the policy's answer for one Input.
//
// The policy returns an object; "allow" (boolean) is required, "reason"
// (string) and "hidden" (boolean) are optional, and any other fields are
// kept in Extra for later use and for the log.
type Decision struct {
	// Allow is true only when the policy explicitly allowed the request.
	Allow bool `json:"allow"`
	// Reason explains the decision; it is shown to the client for a denied
	// tools/call, so it must not reveal what the client may not see.
	Reason string `json:"reason,omitempty"`
	// Hidden marks a denied tools/call of a tool the principal may not even
	// see: the gateway then answers exactly as for an unknown tool.
	Hidden bool `json:"hidden,omitempty"`
	// Extra holds any further fields of the policy's result.
	Extra map[string]any `json:"-"`
	// Err is set on a denial for an error (evaluation, malformed result or
	// unwritable log) rather than by the policy; Reason says the same.
	Err error `json:"-"`
	// nondeterministic is what the non-deterministic builtins of the
	// evaluation returned (nd_builtin_cache JSON), for the log.
	nondeterministic []byte
}

// Result is the decision as the policy's result object: allow, reason and
// hidden (when set) with the extra fields. It is what the decision log
// records and what `mcp-warden policy eval` prints.
func (d Decision) Result() map[string]any {
	m := make(map[string]any, 3+len(d.Extra))
	for k, v := range d.Extra {
		m[k] = v
	}
	m["allow"] = d.Allow
	if d.Reason != "" {
		m["reason"] = d.Reason
	}
	if d.Hidden {
		m["hidden"] = true
	}
	return m
}
