package system.log_test

import data.system.log

event(tool, arguments) := {"input": {"action": "tools/call", "tool": {"upstream_name": tool}, "arguments": arguments}}

test_private_note_names_are_masked if {
	log.mask == {"/input/arguments/name"} with input as event("read_note", {"name": "private/diary"})
}

test_other_arguments_are_kept if {
	count(log.mask) == 0 with input as event("read_note", {"name": "shopping"})
	count(log.mask) == 0 with input as event("echo", {"message": "hi"})
}
