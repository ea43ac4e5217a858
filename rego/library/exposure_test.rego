package mcp.warden_test

import data.mcp.warden

# Exposure: data.warden.servers[<server>] = {"allow": [globs], "block": [globs]}.

test_allow_star_exposes_every_name if {
	every name in ["echo", "files.read", "a/b", "", "Ünïcode tool"] {
		decide(list_of("open", name)) == allowed
	}
}

test_allow_glob_exposes_only_matching_names if {
	decide(list_of("files", "read_file")) == allowed
	decide(list_of("files", "list_dir")) == allowed
	decide(list_of("files", "write_file")) == not_listed("write_file", "files")
}

test_allow_glob_is_anchored if {
	decide(list_of("files", "xread_file")).allow == false
	decide(list_of("exact", "echo")) == allowed
	decide(list_of("exact", "echo2")).allow == false
	decide(list_of("exact", "my_echo")).allow == false
}

test_block_wins_over_allow if {
	decide(list_of("files", "read_secrets")) == not_listed("read_secrets", "files")
	decide(list_of("files", "read_secret")).allow == false
	decide(list_of("files", "read_notes")) == allowed
}

test_block_star_blocks_everything if {
	decide(list_of("walled", "echo")).allow == false
}

test_missing_server_exposes_nothing if {
	decide(list_of("unknown", "echo")) == not_listed("echo", "unknown")
}

test_no_servers_data_exposes_nothing if {
	warden.decision == not_listed("echo", "open") with input as list_of("open", "echo")
}

test_empty_allow_exposes_nothing if {
	decide(list_of("closed", "echo")) == not_listed("echo", "closed")
}

test_missing_allow_exposes_nothing if {
	decide(list_of("blockless", "echo")) == not_listed("echo", "blockless")
}

test_entry_of_another_server_does_not_expose if {
	# The upstream name matches "open"'s allow list, but the tool is from "closed".
	decide(list_of("closed", "anything")).allow == false
}

test_block_that_is_not_a_list_blocks_everything if {
	decide(list_of("misblocked", "echo")).allow == false
	decide(list_of("objblocked", "other")).allow == false
}

test_server_entry_that_is_not_an_object_exposes_nothing if {
	decide(list_of("stringy", "echo")).allow == false
	decide(call_of("stringy", "echo")) == hidden
}

test_malformed_block_pattern_blocks_everything if {
	decide(list_of("badglob", "echo")).allow == false
	decide(list_of("numberglob", "echo")).allow == false
}

test_malformed_allow_pattern_exposes_nothing if {
	decide(list_of("badallow", "echo")).allow == false
}

# glob_matches is glob.match: for every pattern built from these pieces (a
# literal, the literal and "*"; some with other glob syntax, so glob.match
# itself runs) and every name, it is true, false or undefined exactly when
# glob.match is.
glob_pieces := ["", "a", "read_", "file.txt", "a/b", "x-y", "a,b", "}", "]", "!", "-", "a b", "Ü", ".", "*", "?", "\\", "[a]", "{a,b}", "[!a]", "{a}"]

glob_names := {n | some n in glob_pieces} | {"read_file", "a/b/c", "x-y.z", "file.txt.bak", "Üb", "a,b}", "b"}

glob_patterns := {concat("", [a, s]) | some a in glob_pieces; some s in ["", "*"]}

test_glob_matches_equals_glob_match if {
	want := {[p, n, m] | some p in glob_patterns; some n in glob_names; m := glob.match(p, null, n)}
	got := {[p, n, m] | some p in glob_patterns; some n in glob_names; m := warden.glob_matches(p, n)}
	count({x | some x in want; x[2]}) > 50
	got == want
}

test_glob_matches_is_undefined_where_glob_match_is if {
	every p in [7, null, ["a"]] {
		not warden.glob_matches(p, "a")
	}
	not warden.glob_matches("a", 7)
	not warden.glob_matches("a*", null)
	not warden.glob_matches("[a", "a") # malformed
}

test_literal_and_prefix_patterns_take_the_fast_path if {
	fast := {p | some p in glob_patterns; fast_path(p)}
	count(fast) > 25
	every p in ["a*b", "*a", "a?", "[ab]", "{a,b}", "a\\*", "a**", 7, null] {
		not fast_path(p)
	}
	every p in ["", "*", "read_", "read_*", "a.b/c-d *", "a,b", "!a", "a]", "a}*"] {
		fast_path(p)
	}
	warden.glob_prefix("read_*") == "read_"
	not warden.glob_prefix("read_")
}

# fast_path holds for a pattern glob_matches matches with string builtins:
# a prefix* pattern, or a string without glob syntax.
fast_path(p) if warden.glob_prefix(p)

fast_path(p) if {
	is_string(p)
	warden.no_glob_syntax(p)
}
