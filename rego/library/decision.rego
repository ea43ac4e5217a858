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
	"reason": "denied by default: only tools, resources and prompts exposed by data.warden.servers are allowed",
}

# The cases below exclude one another (an item is exposed or not, denied or
# not; an action lists or uses), so they are written as one `else` chain:
# an evaluation stops at the first case that holds, the common one (an
# exposed item nobody denies) first, instead of evaluating every case to
# check that no two disagree.
decision := {"allow": true, "reason": "tool exposed by data.warden.servers and not denied"} if {
	kind
	exposed
	not has_denials
} else := {"allow": false, "reason": concat("; ", sort(denials))} if {
	kind
	exposed
	count(denials) > 0
} else := {"allow": false, "hidden": true, "reason": concat(" ", ["unknown", kind])} if {
	# A tools/call (resources/read, prompts/get) of a tool (resource,
	# prompt) the principal may not see. The gateway answers as for an
	# unknown one, so the reason must not say more than that.
	kind
	not listing
	not exposed
} else := {"allow": false, "reason": reason} if {
	kind
	listing
	not exposed
	reason := concat("", [kind, ` "`, item_name(input.action), `" of server "`, input.server.name, `" is not exposed by data.warden.servers`])
}

# The reasons are built with concat, not sprintf: OPA's Wasm runtime has
# concat built in, while sprintf is a call out of Wasm into the host, which
# a cold tools/list would make for every hidden tool. (json.marshal, also
# built in, would quote the names, but Wasm and topdown escape differently.)
# The names are quoted as they are; the log has them exactly in the input.

# kind names what input.action is about, and is defined for the six actions
# below only, so it also tells a known action from any other. It is an
# `else` chain of string comparisons, not a lookup in an object or set
# literal: Wasm builds a literal anew, entry by entry, on every evaluation.
kind := "tool" if {
	input.action == "tools/call"
} else := "tool" if {
	input.action == "tools/list"
} else := "resource" if {
	input.action == "resources/read"
} else := "resource" if {
	input.action == "resources/list"
} else := "prompt" if {
	input.action == "prompts/get"
} else := "prompt" if {
	input.action == "prompts/list"
}

# listing tells the three list actions from the three that use an item
# (tools/call, resources/read, prompts/get); it is read only where kind
# holds.
listing if endswith(input.action, "/list")

# Every reason added by `deny contains reason if {...}` in any module of this
# package. Read through data. so that the library compiles on its own, before
# any module defines deny; a reason that is not a string makes concat fail,
# and the decision falls back to the default deny.
denials := {reason | some reason in data.mcp.warden.deny}

# has_denials holds when deny is defined and is anything but the empty set:
# reasons, or deny written as something other than a partial set
# (`deny := "why"`, say); either way the decision is not "allowed". It is one
# rule, not `count(denials) == 0` and a check of deny's type, so that an
# allowed decision memoises one value fewer. (`not data.mcp.warden.deny !=
# set()` in the body would not do: the compiler evaluates the reference
# before the `not`, and an undefined deny would fail it.)
has_denials if data.mcp.warden.deny != set()
