// Command sparkctl is the relying party and vendor tool: it verifies evidence, talks to an
// appliance over the encrypted API, checks receipts and signs releases. See README.md.
package main

import "os"

func main() { os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }
