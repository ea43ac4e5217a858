# Decision-log rules of the demo, with OPA's semantics: the input is the
# whole event (input.input is the decision's input). Defining a mask rule
# replaces mcp-warden's default mask (all tools/call arguments removed), so
# the demo logs arguments except the names of private notes.
package system.log

mask contains "/input/arguments/name" if {
	input.input.tool.upstream_name == "read_note"
	startswith(trim_left(input.input.arguments.name, "/."), "private")
}
