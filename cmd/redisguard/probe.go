package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/redisguard/redisguard"
)

// Exit codes of the probe subcommand. Kubernetes exec probes read 0 as
// success and anything else as failure; 2 lets a person or a script tell a
// broken probe definition from a sick Redis.
const (
	exitHealthy   = 0
	exitUnhealthy = 1
	exitUsage     = 2
)

// envPassword is read when no --password flag is given: flags show up in
// ps and in the pod spec, an environment variable from a Secret does not.
const envPassword = "REDIS_PASSWORD"

const probeUsage = `usage: redisguard probe [flags]

Checks Redis the way a readiness probe should: PING, and with --write-key a
short-lived SET, plus cluster_state and breakers in Cluster mode. Prints a
one-line summary, or the JSON report with --json.

Exit status: 0 healthy, 1 unhealthy, 2 bad usage.

The password comes from --password or, if that is not given, from the URL or
the REDIS_PASSWORD environment variable; prefer the variable. It is never
printed.

Flags:
`

// probe runs one health check and returns the exit code.
func probe(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, probeUsage)
		fs.PrintDefaults()
	}
	var (
		addr     = fs.String("addr", "", "comma-separated host:port list: the server, cluster seed nodes, or sentinels")
		mode     = fs.String("mode", "auto", "auto, standalone, sentinel or cluster (auto: --master-name means sentinel, several addresses mean cluster)")
		master   = fs.String("master-name", "", "Sentinel master name")
		rawURL   = fs.String("url", "", "connection URL (redis://, rediss://, redis+sentinel://, redis+cluster://) instead of --addr, --mode and --master-name")
		writeKey = fs.String("write-key", "", `key to SET with a short TTL, e.g. "redisguard:health:<service>"; empty: PING only`)
		timeout  = fs.Duration("timeout", redisguard.DefaultReadinessTimeout, "bound on the whole check")
		asJSON   = fs.Bool("json", false, "print the JSON report instead of a one-line summary")
		username = fs.String("username", "", "ACL user name")
		password = fs.String("password", "", "password (prefer the "+envPassword+" environment variable)")
		verbose  = fs.Bool("verbose", false, "also print go-redis's own log lines (dial failures, sentinel switches) on stderr")
	)
	if err := fs.Parse(args); err != nil {
		// Including -h: a probe that "succeeds" because it printed its help
		// would report a healthy Redis it never asked.
		return exitUsage
	}
	cfg, err := probeConfig(fs, *rawURL, *addr, *mode, *master)
	if err == nil && *timeout <= 0 {
		err = fmt.Errorf("--timeout must be positive, got %v", *timeout)
	}
	if err != nil {
		secret := firstNonEmpty(*password, os.Getenv(envPassword))
		fmt.Fprintln(stderr, "redisguard probe:", redact(err.Error(), secret, cfg.Password))
		fmt.Fprintln(stderr, "run 'redisguard probe -h' for usage")
		return exitUsage
	}
	if *username != "" {
		cfg.Username = *username
	}
	// The flag, then the URL, then the environment.
	cfg.Password = firstNonEmpty(*password, cfg.Password, os.Getenv(envPassword))
	// Nothing in one check may wait longer than the check may take; a URL
	// that sets its own timeouts keeps them, bounded by --timeout anyway.
	for _, d := range []*time.Duration{&cfg.DialTimeout, &cfg.ReadTimeout, &cfg.WriteTimeout} {
		if *d == 0 {
			*d = *timeout
		}
	}

	// go-redis logs through a process-wide logger of its own; the probe's
	// output is the report, and its lines go to stderr only on request.
	logLevel := slog.LevelInfo
	if *verbose {
		logLevel = slog.LevelDebug
	}
	redisguard.LogGoRedisTo(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: logLevel})), slog.LevelDebug)

	c, err := redisguard.NewClient(cfg)
	if err != nil {
		fmt.Fprintln(stderr, "redisguard probe:", redact(err.Error(), cfg.Password, cfg.SentinelPassword))
		return exitUsage
	}
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	rep := c.Check(ctx, redisguard.CheckOptions{WriteKey: *writeKey})

	// The report is already scrubbed of the configured passwords; redacting
	// the output again costs nothing and covers what the report does not know.
	var out string
	if *asJSON {
		body, err := json.Marshal(rep)
		if err != nil {
			fmt.Fprintln(stderr, "redisguard probe: encoding the report:", err)
			return exitUnhealthy
		}
		out = string(body)
	} else {
		out = rep.String()
	}
	fmt.Fprintln(stdout, redact(out, cfg.Password, cfg.SentinelPassword))
	if rep.Healthy {
		return exitHealthy
	}
	return exitUnhealthy
}

// probeConfig builds the Config from --url or from --addr, --mode and
// --master-name, which cannot be mixed.
func probeConfig(fs *flag.FlagSet, rawURL, addr, mode, master string) (redisguard.Config, error) {
	if fs.NArg() > 0 {
		return redisguard.Config{}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if rawURL != "" {
		var conflict []string
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "addr", "mode", "master-name":
				conflict = append(conflict, "--"+f.Name)
			}
		})
		if len(conflict) > 0 {
			return redisguard.Config{}, fmt.Errorf("--url cannot be combined with %s", strings.Join(conflict, ", "))
		}
		return configFromURL(rawURL)
	}
	var cfg redisguard.Config
	for a := range strings.SplitSeq(addr, ",") {
		if a = strings.TrimSpace(a); a != "" {
			cfg.Addrs = append(cfg.Addrs, a)
		}
	}
	if len(cfg.Addrs) == 0 {
		return cfg, errors.New("--addr or --url is required")
	}
	m, err := parseMode(mode)
	if err != nil {
		return cfg, err
	}
	cfg.Mode = m
	cfg.MasterName = master
	return cfg, nil
}

// configFromURL is the one place --url meets the library's URL parser. Its
// errors never quote the password.
func configFromURL(s string) (redisguard.Config, error) { return redisguard.ParseURL(s) }

func parseMode(s string) (redisguard.Mode, error) {
	for _, m := range []redisguard.Mode{redisguard.ModeAuto, redisguard.ModeStandalone, redisguard.ModeSentinel, redisguard.ModeCluster} {
		if strings.EqualFold(s, m.String()) {
			return m, nil
		}
	}
	return 0, fmt.Errorf("--mode %q is not auto, standalone, sentinel or cluster", s)
}

func firstNonEmpty(values ...string) string {
	for _, v := range values {
		if v != "" {
			return v
		}
	}
	return ""
}

// redact removes every non-empty secret from text.
func redact(text string, secrets ...string) string {
	for _, s := range secrets {
		if s != "" {
			text = strings.ReplaceAll(text, s, "[redacted]")
		}
	}
	return text
}
