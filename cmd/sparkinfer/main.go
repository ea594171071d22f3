// Command sparkinfer is the appliance: it runs models, serves the encrypted
// API, produces evidence and re-runs evaluations. See README.md.
package main

import "os"

func main() { os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }
