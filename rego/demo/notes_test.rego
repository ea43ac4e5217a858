package mcp.warden_test

import data.mcp.warden

demo_servers := {"demo": {"allow": ["*"], "block": ["reset_notes"]}}

demo_refusal := {
	"allow": false,
	"reason": "notes under private/ and paths with .. are not readable through the gateway",
}

demo_call(tool, arguments) := {
	"action": "tools/call",
	"principal": {"id": "anonymous", "transport": "stdio"},
	"server": {"name": "demo", "command": "demo-server", "confinement": {}},
	"tool": {"name": tool, "upstream_name": tool, "sha256": ""},
	"arguments": arguments,
	"time": "2026-01-01T00:00:00Z",
}

demo_decide(inp) := d if {
	d := warden.decision with input as inp with data.warden.servers as demo_servers
}

test_demo_public_note_is_readable if {
	every name in ["shopping", "ideas/2026", "privateer", "public/private/x", "a.b"] {
		demo_decide(demo_call("read_note", {"name": name})).allow == true
	}
}

test_demo_private_notes_are_refused if {
	every name in ["private/diary", "private/", "/private/diary", "./private/diary", "private"] {
		demo_decide(demo_call("read_note", {"name": name})) == demo_refusal
	}
}

test_demo_dotdot_paths_are_refused if {
	every name in ["../etc/passwd", "ideas/../../x", "..", "a..b"] {
		demo_decide(demo_call("read_note", {"name": name})) == demo_refusal
	}
}

test_demo_name_that_is_not_a_string_is_refused if {
	demo_decide(demo_call("read_note", {"name": ["private/diary"]})) == demo_refusal
	demo_decide(demo_call("read_note", {"name": 7})) == demo_refusal
}

test_demo_other_tools_are_not_affected if {
	demo_decide(demo_call("echo", {"message": "private/.."})).allow == true
	demo_decide(demo_call("add", {"a": 1, "b": 2})).allow == true
}

test_demo_rule_applies_only_to_server_demo if {
	inp := object.union(demo_call("read_note", {"name": "private/diary"}), {"server": {"name": "other"}})
	d := warden.decision with input as inp with data.warden.servers as {"other": {"allow": ["*"]}}
	d.allow == true
}

test_demo_reset_notes_is_hidden if {
	demo_decide(demo_call("reset_notes", {})) == {"allow": false, "hidden": true, "reason": "unknown tool"}
}

test_demo_read_note_stays_listed if {
	inp := object.union(object.remove(demo_call("read_note", {}), ["arguments"]), {"action": "tools/list"})
	demo_decide(inp).allow == true
}
