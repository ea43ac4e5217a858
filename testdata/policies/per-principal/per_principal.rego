# A policy under which tools and prompts whose upstream name starts with
# "alice_", and resources whose URI starts with "test://alice_", exist for
# the principal alice only, and everything else for
# everyone: for tests of what one principal may learn of another's lists.
package mcp.warden

default decision := {"allow": true, "reason": "per-principal test policy: visible"}

decision := {"allow": false, "hidden": true, "reason": "per-principal test policy: alice's only"} if {
	startswith(object.get(input, ["tool", "upstream_name"], object.get(input, ["prompt", "upstream_name"], "")), "alice_")
	input.principal.id != "alice"
}

decision := {"allow": false, "hidden": true, "reason": "per-principal test policy: alice's only"} if {
	startswith(object.get(input, ["resource", "uri"], ""), "test://alice_")
	input.principal.id != "alice"
}
