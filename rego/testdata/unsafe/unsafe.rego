package unsafe

allow if {
	input.user == user
}
