# Demo rules for the demo MCP server (server name "demo"), loaded on top of
# the default library by `make run`. The demo config exposes all of its
# tools but reset_notes through data.warden.servers.demo.
package mcp.warden

deny contains "notes under private/ and paths with .. are not readable through the gateway" if {
	input.action == "tools/call"
	input.server.name == "demo"
	input.tool.upstream_name == "read_note"
	unreadable_note(input.arguments.name)
}

# Leading "/" and "." are trimmed first, so "/private/x" and "./private/x"
# are refused like "private/x".
unreadable_note(name) if startswith(trim_left(name, "/."), "private/")

unreadable_note(name) if trim_left(name, "/.") == "private"

unreadable_note(name) if contains(name, "..")

# A name the checks above cannot read (not a string) is refused too.
unreadable_note(name) if not is_string(name)
