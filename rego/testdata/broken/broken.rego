package broken

allow if {
	input.user == "alice"
# the closing brace of the rule above is missing
