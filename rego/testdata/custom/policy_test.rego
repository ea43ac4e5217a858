package mcp.warden_test

import data.mcp.warden

test_trusted_tool_is_allowed if {
	warden.decision.allow with input as {"tool": {"upstream_name": "echo"}}
}

test_other_tool_is_refused if {
	not warden.decision.allow with input as {"tool": {"upstream_name": "rm"}}
}
