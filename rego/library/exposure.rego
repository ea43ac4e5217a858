package mcp.warden

# exposed holds when the tool, resource or prompt of input.server is exposed
# by data.warden.servers[<server name>]:
#
#	{"allow": [globs], "block": [globs],                 # tools, by upstream name
#	 "resources": {"allow": [globs], "block": [globs]},  # resources, by URI (templates by URI template)
#	 "prompts": {"allow": [globs], "block": [globs]}}    # prompts, by upstream name
#
# some allow pattern matches the item's name and no block pattern does, and
# is false otherwise. No entry, or no allow list, exposes nothing.
#
# Patterns are glob.match patterns without delimiters: "*" matches any name,
# dots and slashes included.
#
# exposed is one rule, the only one of exposure that the evaluation memoises:
# the item's filter and name are functions of the action, and the block check
# is part of the body, since OPA's Wasm code inserts every rule's value into a
# memo table that rehashes itself past five entries (see RATIONALE.md, "Why
# the default decision is one `else` chain"). The block list is checked after
# an allow pattern matched, so a hidden item does not pay for it. The default
# false is a value the memo keeps, where undefined is not: the cases of
# decision that read `not exposed` do not evaluate it again.
default exposed := false

exposed if {
	filter := item_filter(input.action)
	name := item_name(input.action)
	some pattern in filter.allow
	glob_matches(pattern, name)

	# A block list that is not an array, or a block pattern glob.match
	# cannot evaluate (not a string, malformed), blocks every item: fail
	# closed.
	block_list := object.get(filter, "block", [])
	is_array(block_list)
	every pattern in block_list {
		spares(pattern, name)
	}
}

# glob_matches(pattern, name) is glob.match(pattern, null, name): true,
# false, or undefined when glob.match fails. Literal and prefix* patterns,
# the common ones, are matched with string builtins (exposure_test.rego
# checks the same answers over many patterns and names): OPA's Wasm runtime
# compiles a glob anew on every evaluation. `else` keeps glob.match from
# running when a fast path applies.
glob_matches(pattern, name) := startswith(name, prefix) if {
	is_string(name)
	prefix := glob_prefix(pattern)
} else := pattern == name if {
	is_string(name)
	is_string(pattern)
	no_glob_syntax(pattern)
} else := glob.match(pattern, null, name)

# glob_prefix is what a prefix* pattern matches names starting with: the
# pattern without its one trailing "*", when what is left has no glob
# syntax.
glob_prefix(pattern) := prefix if {
	prefix := trim_suffix(pattern, "*")
	prefix != pattern
	no_glob_syntax(prefix)
}

# no_glob_syntax holds for a string that glob.match reads as itself. Outside
# [...] and {...}, "]", "}", "," and "!" match themselves, so "*", "?", "[",
# "{" and "\" are all there is to look for; one expression per character,
# not a loop over them, since each iteration costs topdown an allocation.
no_glob_syntax(s) if {
	not contains(s, "*")
	not contains(s, "?")
	not contains(s, "[")
	not contains(s, "{")
	not contains(s, "\\")
}

# item_filter and item_name have one case per kind of item; the cases
# exclude one another, and `else` stops at the one that holds.
item_filter(action) := data.warden.servers[input.server.name] if startswith(action, "tools/")

else := data.warden.servers[input.server.name].resources if startswith(action, "resources/")

else := data.warden.servers[input.server.name].prompts if startswith(action, "prompts/")

item_name(action) := input.tool.upstream_name if startswith(action, "tools/")

else := input.resource.uri if startswith(action, "resources/")

else := input.prompt.upstream_name if startswith(action, "prompts/")

# spares holds when glob.match evaluates pattern and finds no match.
#
# The check that can fail is written as a rule and negated whole: in
# `not glob_matches(...) == false`, the call would be compiled to run before
# the `not`, and a call that fails would then unblock the item.
spares(pattern, name) if glob_matches(pattern, name) == false
