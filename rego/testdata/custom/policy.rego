# A custom policy: allows the tools listed in data.warden.trusted, for any
# server, and reports a number so that tests can see how numbers come back.
package mcp.warden

default decision := {"allow": false, "reason": "not trusted"}

decision := {"allow": true, "reason": "trusted", "weight": 1.5} if {
	input.tool.upstream_name in data.warden.trusted
}
