// Command redisguard is the probe and demo tool for the redisguard library.
//
//	redisguard demo    go-redis alone vs redisguard while a server hangs (see demo -h)
//	redisguard probe   check Redis as a readiness probe would (see probe -h)
package main

import (
	"fmt"
	"io"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is main without the process: it returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "demo":
		return demo(args[1:], stdout, stderr)
	case "probe":
		return probe(args[1:], stdout, stderr)
	default:
		usage(stderr)
		return 2
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: redisguard demo [flags] | redisguard probe [flags]")
}
