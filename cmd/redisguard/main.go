// Command redisguard is the probe and demo tool for the redisguard library.
//
//	redisguard demo    run the library against an embedded server
//	redisguard probe   check Redis as a readiness probe would (see probe -h)
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/redisguard/redisguard"
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
		if err := demo(stdout); err != nil {
			fmt.Fprintln(stderr, "demo:", err)
			return 1
		}
		return 0
	case "probe":
		return probe(args[1:], stdout, stderr)
	default:
		usage(stderr)
		return 2
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: redisguard demo | redisguard probe [flags]")
}

// demo runs a guarded client against an embedded miniredis, so it needs
// nothing but Go.
func demo(out io.Writer) error {
	srv, err := miniredis.Run()
	if err != nil {
		return err
	}
	defer srv.Close()

	c, err := redisguard.NewClient(redisguard.Config{Addrs: []string{srv.Addr()}})
	if err != nil {
		return err
	}
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Set(ctx, "greeting", "hello from redisguard", 0).Err(); err != nil {
		return err
	}
	v, err := c.Get(ctx, "greeting").Result()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "embedded server at %s\nGET greeting -> %q\nhealthy: %v\n", srv.Addr(), v, c.Healthy(ctx, "redisguard:health:demo"))
	return nil
}
