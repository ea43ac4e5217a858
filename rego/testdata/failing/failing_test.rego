package failing_test

test_passes if {
	1 + 1 == 2
}

test_fails if {
	1 + 1 == 3
}

todo_test_skipped if {
	false
}
