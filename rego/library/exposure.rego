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
	matches(pattern)
	not blocked(filter)
}

# matches holds when glob.match(pattern, null, item_name) is true. Literal
# and prefix* patterns, the common ones, are matched with string builtins:
# the same answer (exposure_test.rego checks it over many patterns and
# names) without compiling a glob, which OPA's Wasm runtime does anew on
# every evaluation.
matches(pattern) if {
	simple_glob(pattern)
	simple_match(pattern, item_name)
}

matches(pattern) if {
	not simple_glob(pattern)
	glob.match(pattern, null, item_name)
}

# simple_glob holds for a string that is a literal, or a literal followed by
# one "*": no other glob syntax in it.
simple_glob(pattern) if {
	is_string(pattern)
	not glob_syntax(trim_suffix(pattern, "*"))
}

glob_syntax(s) if {
	some c in ["*", "?", "[", "]", "{", "}", "\\", ",", "!"]
	contains(s, c)
}

# simple_match is glob.match for a simple_glob pattern and a string name.
simple_match(pattern, name) if {
	is_string(name)
	not endswith(pattern, "*")
	pattern == name
}

simple_match(pattern, name) if {
	is_string(name)
	endswith(pattern, "*")
	startswith(name, trim_suffix(pattern, "*"))
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
spares(pattern) if {
	simple_glob(pattern)
	is_string(item_name)
	not simple_match(pattern, item_name)
}

spares(pattern) if {
	not simple_glob(pattern)
	glob.match(pattern, null, item_name) == false
}
