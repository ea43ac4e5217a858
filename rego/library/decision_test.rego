package mcp.warden_test

import data.mcp.warden

servers := {
	"files": {"allow": ["read_*", "list_*"], "block": ["read_secret*"]},
	"exact": {"allow": ["echo"]},
	"open": {"allow": ["*"]},
	"walled": {"allow": ["*"], "block": ["*"]},
	"closed": {"allow": []},
	"blockless": {"block": []},
	"misblocked": {"allow": ["*"], "block": "echo"},
	"objblocked": {"allow": ["*"], "block": {"x": "echo"}},
	"stringy": "*",
	"badglob": {"allow": ["*"], "block": ["[unclosed", 7]},
	"numberglob": {"allow": ["*"], "block": [7]},
	"badallow": {"allow": ["[unclosed"]},
}

allowed := {"allow": true, "reason": "tool exposed by data.warden.servers and not denied"}

hidden := {"allow": false, "hidden": true, "reason": "unknown tool"}

default_deny := {
	"allow": false,
	"reason": "denied by default: only tools, resources and prompts exposed by data.warden.servers are allowed",
}

not_listed(tool, server) := {
	"allow": false,
	"reason": sprintf("tool %q of server %q is not exposed by data.warden.servers", [tool, server]),
}

call_of(server, tool) := {
	"action": "tools/call",
	"principal": {"id": "alice", "claims": {}, "transport": "stdio"},
	"server": {"name": server, "command": "/bin/true", "confinement": {"process_group": true}},
	"tool": {"name": sprintf("%s__%s", [server, tool]), "upstream_name": tool, "sha256": ""},
	"arguments": {},
	"request_id": "1",
	"time": "2026-01-01T00:00:00Z",
}

list_of(server, tool) := object.union(object.remove(call_of(server, tool), ["arguments"]), {"action": "tools/list"})

decide(inp) := d if {
	d := warden.decision with input as inp with data.warden.servers as servers
}

# tools/call

test_call_of_exposed_tool_is_allowed if {
	decide(call_of("open", "echo")) == allowed
	decide(call_of("files", "read_file")) == allowed
}

test_call_of_unexposed_tool_is_hidden if {
	decide(call_of("files", "write_file")) == hidden
	decide(call_of("unknown", "echo")) == hidden
	decide(call_of("closed", "echo")) == hidden
}

test_call_of_blocked_tool_is_hidden if {
	decide(call_of("files", "read_secrets")) == hidden
	decide(call_of("walled", "echo")) == hidden
}

test_hidden_reason_reveals_nothing if {
	d := decide(call_of("files", "read_secrets"))
	not contains(d.reason, "read_secrets")
	not contains(d.reason, "files")
	not contains(d.reason, "block")
}

test_call_without_tool_is_hidden if {
	decide(object.remove(call_of("open", "echo"), ["tool"])) == hidden
}

# deny extensions

test_one_denial_refuses_the_call if {
	d := decide(call_of("open", "echo")) with warden.deny as {"not today"}
	d == {"allow": false, "reason": "not today"}
}

test_denial_reasons_are_sorted_and_joined if {
	d := decide(call_of("open", "echo")) with warden.deny as {"zeta refuses", "alpha refuses", "mid refuses"}
	d == {"allow": false, "reason": "alpha refuses; mid refuses; zeta refuses"}
}

test_denial_hides_tool_from_list if {
	d := decide(list_of("open", "echo")) with warden.deny as {"b", "a"}
	d == {"allow": false, "reason": "a; b"}
}

test_hidden_wins_over_denial if {
	decide(call_of("files", "write_file")) == hidden with warden.deny as {"some reason"}
}

test_denial_that_is_not_a_string_denies_by_default if {
	decide(call_of("open", "echo")) == default_deny with warden.deny as {"a reason", 42}
}

test_deny_that_is_not_a_set_denies_by_default if {
	decide(call_of("open", "echo")) == default_deny with warden.deny as "a reason"
	decide(list_of("open", "echo")).allow == false with warden.deny as ["a reason"]
	decide(call_of("open", "echo")) == default_deny with warden.deny as true
	decide(call_of("open", "echo")) == default_deny with warden.deny as false
	decide(call_of("open", "echo")) == default_deny with warden.deny as null
	decide(call_of("open", "echo")) == default_deny with warden.deny as []
	decide(call_of("open", "echo")) == default_deny with warden.deny as {}
	decide(call_of("open", "echo")) == default_deny with warden.deny as ""
	decide(call_of("files", "read_file")) == default_deny with warden.deny as 0
}

test_no_denial_allows if {
	decide(call_of("open", "echo")) == allowed with warden.deny as set()
}

# actions

test_unknown_action_is_denied_by_default if {
	decide(object.union(call_of("open", "echo"), {"action": "sampling/createMessage"})) == default_deny
	decide(object.union(call_of("open", "echo"), {"action": "TOOLS/CALL"})) == default_deny
	decide(object.union(call_of("open", "echo"), {"action": "sampling/list"})) == default_deny
	decide(object.union(call_of("open", "echo"), {"action": "tools/lists"})) == default_deny
	decide(object.union(call_of("open", "echo"), {"action": "tools/"})) == default_deny
	decide(object.union(call_of("open", "echo"), {"action": 7})) == default_deny
	decide(object.union(call_of("open", "echo"), {"action": ["tools/call"]})) == default_deny
}

test_missing_action_is_denied_by_default if {
	decide(object.remove(call_of("open", "echo"), ["action"])) == default_deny
}

test_empty_input_is_denied_by_default if {
	warden.decision == default_deny with input as {} with data.warden.servers as servers
}

test_decision_has_exactly_the_contract_fields if {
	every inp in [call_of("open", "echo"), call_of("closed", "echo"), list_of("closed", "echo"), {}] {
		d := decide(inp)
		is_boolean(d.allow)
		is_string(d.reason)
		object.keys(d) - {"allow", "reason", "hidden"} == set()
	}
}

# resources and prompts

content_servers := {
	"docs": {
		"allow": ["*"],
		"resources": {"allow": ["file:///srv/*"], "block": ["file:///srv/secret*"]},
		"prompts": {"allow": ["summarize"]},
	},
	"bare": {"allow": ["*"]},
}

read_of(server, uri) := {
	"action": "resources/read",
	"principal": {"id": "alice", "transport": "stdio"},
	"server": {"name": server, "confinement": {}},
	"resource": {"uri": uri},
	"time": "2026-01-01T00:00:00Z",
}

prompt_input(action, server, name) := {
	"action": action,
	"principal": {"id": "alice", "transport": "stdio"},
	"server": {"name": server, "confinement": {}},
	"prompt": {"name": name, "upstream_name": name},
	"time": "2026-01-01T00:00:00Z",
}

decide_content(inp) := d if {
	d := warden.decision with input as inp with data.warden.servers as content_servers
}

test_read_of_exposed_resource_is_allowed if {
	decide_content(read_of("docs", "file:///srv/readme.md")) == allowed
}

test_read_of_unexposed_resource_is_hidden if {
	decide_content(read_of("docs", "file:///etc/passwd")) == {"allow": false, "hidden": true, "reason": "unknown resource"}
	decide_content(read_of("docs", "file:///srv/secret.txt")).hidden
	decide_content(read_of("bare", "file:///srv/readme.md")).hidden
}

test_resource_list_exposure_follows_the_resource_filter if {
	decide_content(object.union(read_of("docs", "file:///srv/a"), {"action": "resources/list"})) == allowed
	d := decide_content(object.union(read_of("bare", "file:///srv/a"), {"action": "resources/list"}))
	d == {"allow": false, "reason": "resource \"file:///srv/a\" of server \"bare\" is not exposed by data.warden.servers"}
}

test_prompts_follow_the_prompt_filter if {
	decide_content(prompt_input("prompts/get", "docs", "summarize")) == allowed
	decide_content(prompt_input("prompts/list", "docs", "summarize")) == allowed
	decide_content(prompt_input("prompts/get", "docs", "other")) == {"allow": false, "hidden": true, "reason": "unknown prompt"}
	not decide_content(prompt_input("prompts/list", "bare", "summarize")).allow
}

test_tool_allow_list_does_not_expose_resources_or_prompts if {
	decide_content(read_of("bare", "anything")).hidden
	decide_content(prompt_input("prompts/get", "bare", "anything")).hidden
}
