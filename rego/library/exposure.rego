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
	glob_matches(pattern, item_name)
	not blocked
}

# glob_matches(pattern, name) is glob.match(pattern, null, name): true,
# false, or undefined when glob.match fails. Literal and prefix* patterns,
# the common ones, are matched with string builtins (exposure_test.rego
# checks the same answers over many patterns and names): OPA's Wasm runtime
# compiles a glob anew on every evaluation. The pattern is classified once,
# and `else` keeps glob.match from running when the fast path applies.
glob_matches(pattern, name) := literal_match(literal == pattern, literal, name) if {
	is_string(name)
	literal := glob_literal(pattern)
} else := glob.match(pattern, null, name)

# glob_literal is a string pattern without one trailing "*", when what is
# left has no glob syntax. Outside [...] and {...}, "]", "}", "," and "!"
# match themselves, so "*", "?", "[", "{" and "\" are all there is to look
# for; one rule body per character, not a loop over them, since each
# iteration costs topdown an allocation.
glob_literal(pattern) := literal if {
	literal := trim_suffix(pattern, "*")
	not glob_syntax(literal)
}

glob_syntax(s) if contains(s, "*")

glob_syntax(s) if contains(s, "?")

glob_syntax(s) if contains(s, "[")

glob_syntax(s) if contains(s, "{")

glob_syntax(s) if contains(s, "\\")

# literal_match(exact, literal, name): name is the literal (a pattern
# without "*"), or starts with it (a prefix* pattern).
literal_match(true, literal, name) := literal == name

literal_match(false, prefix, name) := startswith(name, prefix)

# item_filter and item_name have one case per kind of item; the cases
# exclude one another, and `else` stops at the one that holds.
item_filter := data.warden.servers[input.server.name] if startswith(input.action, "tools/")

else := data.warden.servers[input.server.name].resources if startswith(input.action, "resources/")

else := data.warden.servers[input.server.name].prompts if startswith(input.action, "prompts/")

item_name := input.tool.upstream_name if startswith(input.action, "tools/")

else := input.resource.uri if startswith(input.action, "resources/")

else := input.prompt.upstream_name if startswith(input.action, "prompts/")

# A block list that is not an array, or a block pattern glob.match cannot
# evaluate (not a string, malformed), blocks every tool: fail closed.
# blocked and block_list are rules of the item's filter, not functions of
# it, so that each is evaluated once per decision.
blocked if not block_list

blocked if {
	some pattern in block_list
	not spares(pattern)
}

block_list := list if {
	list := object.get(item_filter, "block", [])
	is_array(list)
}

# spares holds when glob.match evaluates pattern and finds no match.
#
# The check that can fail is written as a rule and negated whole: in
# `not glob_matches(...) == false`, the call would be compiled to run before
# the `not`, and a call that fails would then unblock the tool.
spares(pattern) if glob_matches(pattern, item_name) == false
