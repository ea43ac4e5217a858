package mcp.warden

# exposed holds when the tool, resource or prompt of input.server is exposed
# by data.warden.servers[<server name>]:
#
#	{"allow": [globs], "block": [globs],                 # tools, by upstream name
#	 "resources": {"allow": [globs], "block": [globs]},  # resources, by URI (templates by URI template)
#	 "prompts": {"allow": [globs], "block": [globs]}}    # prompts, by upstream name
#
# some allow pattern matches the item's name and no block pattern does. No
# entry, or no allow list, exposes nothing.
#
# Patterns are glob.match patterns without delimiters: "*" matches any name,
# dots and slashes included.
exposed if {
	filter := item_filter
	some pattern in filter.allow
	glob.match(pattern, null, item_name)
	not blocked(filter)
}

item_filter := data.warden.servers[input.server.name] if startswith(input.action, "tools/")

item_filter := data.warden.servers[input.server.name].resources if startswith(input.action, "resources/")

item_filter := data.warden.servers[input.server.name].prompts if startswith(input.action, "prompts/")

item_name := input.tool.upstream_name if startswith(input.action, "tools/")

item_name := input.resource.uri if startswith(input.action, "resources/")

item_name := input.prompt.upstream_name if startswith(input.action, "prompts/")

# A block list that is not an array, or a block pattern glob.match cannot
# evaluate (not a string, malformed), blocks every tool: fail closed.
blocked(filter) if not block_list(filter)

blocked(filter) if {
	some pattern in block_list(filter)
	not spares(pattern)
}

block_list(filter) := list if {
	list := object.get(filter, "block", [])
	is_array(list)
}

# spares holds when glob.match evaluates pattern and finds no match.
#
# The checks that can fail are written as rules and negated whole: in
# `not glob.match(...) == false`, the call would be compiled to run before
# the `not`, and a call that fails would then unblock the tool.
spares(pattern) if glob.match(pattern, null, item_name) == false
