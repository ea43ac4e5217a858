// Command crasher stands in for an MCP stdio server that dies at start: it
// writes one line to stderr and exits with status 3 without reading stdin.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "crasher: exiting with status 3")
	os.Exit(3)
}
