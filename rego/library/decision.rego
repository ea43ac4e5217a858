# The default mcp-warden policy: the single entry point every tools/list
# exposure and tools/call decision is read from.
#
# Exposure comes from data.warden.servers (see exposure.rego); other modules
# of this package refuse more by adding reasons to the partial set `deny`:
#
#	deny contains "why" if { ... }
package mcp.warden

# Anything not explicitly allowed below is refused: unknown actions, and
# inputs missing the fields the rules need.
default decision := {
	"allow": false,
	"reason": "denied by default: only tools/list and tools/call of tools exposed by data.warden.servers are allowed",
}

# A tools/call of a tool the principal may not see. The gateway answers as
# for an unknown tool, so the reason must not say more than that.
decision := {"allow": false, "hidden": true, "reason": "unknown tool"} if {
	input.action == "tools/call"
	not exposed
}

decision := {"allow": false, "reason": reason} if {
	input.action == "tools/list"
	not exposed
	reason := sprintf("tool %q of server %q is not exposed by data.warden.servers", [input.tool.upstream_name, input.server.name])
}

decision := {"allow": false, "reason": concat("; ", sort(denials))} if {
	input.action in actions
	exposed
	count(denials) > 0
}

decision := {"allow": true, "reason": "tool exposed by data.warden.servers and not denied"} if {
	input.action in actions
	exposed
	count(denials) == 0
	not malformed_deny
}

actions := {"tools/list", "tools/call"}

# Every reason added by `deny contains reason if {...}` in any module of this
# package. Read through data. so that the library compiles on its own, before
# any module defines deny; a reason that is not a string makes concat fail,
# and the decision falls back to the default deny.
denials := {reason | some reason in data.mcp.warden.deny}

# deny written as something other than a partial set (`deny := "why"`, say)
# would add no reason to denials: it falls back to the default deny instead.
malformed_deny if {
	d := data.mcp.warden.deny
	not is_set(d)
}
