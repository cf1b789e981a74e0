package redisguard

import (
	"crypto/tls"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// ParseURL parses a connection URL into a Config:
//
//	redis://[user[:password]@]host[:port][/db][?params]
//	rediss://...                                        (TLS)
//	redis+sentinel://[user[:password]@]host[:port][,host[:port]...]/master[/db][?params]
//	rediss+sentinel://...                               (TLS)
//	redis+cluster://[user[:password]@]host[:port][,host[:port]...][?params]
//	rediss+cluster://...                                (TLS)
//
// redis:// and rediss:// leave Mode to ModeAuto: one address, and the client
// finds out on first contact whether it is a cluster node (see Mode). The
// other schemes set Mode explicitly (ModeSentinel or ModeCluster). The port
// defaults to 6379, or 26379 for sentinels; an IPv6 address is written in
// brackets, [::1]:6379. In redisguard's schemes the user name and password
// authenticate to the Redis servers that hold the data (Username,
// Password): in a redis+sentinel:// URL they are the master's. Sentinel
// credentials, which are usually different or absent, go in the
// sentinel_username and sentinel_password parameters. (go-redis's failover
// form, below, keeps go-redis's reading.)
//
// TLS schemes set TLSConfig to verify the server with TLS 1.2 or later. For
// rediss:// ServerName is the host. For Sentinel and Cluster it stays empty,
// even with one host in the URL: the client also dials servers it discovers
// (the master, the other cluster nodes), and an empty ServerName makes
// crypto/tls verify each connection against the name it dialled rather than
// against the first host in the URL.
//
// go-redis's URL forms read as go-redis reads them: redis://host?addr=h2:p
// lists more hosts (a Cluster, as ParseClusterURL), and
// redis://host?master_name=m is a Sentinel URL as ParseFailoverURL makes it,
// the user info authenticating to the sentinels and the username and
// password parameters to the master.
//
// redisguard's parameters:
//
//	parameter               Config field          value
//	max_connections         MaxConnections        whole number, 0 to 1048576
//	max_long_connections    MaxLongConnections    whole number, 0 to 1048576
//	node_failure_threshold  NodeFailureThreshold  whole number; negative turns breakers off
//	node_recovery_time      NodeRecoveryTime      duration
//	health_write_ttl        HealthWriteTTL        duration
//	slow_node_factor        SlowNodeFactor        number; negative turns slow-node marking off
//	slow_node_floor         SlowNodeFloor         duration
//	slow_node_mark_after    SlowNodeMarkAfter     duration
//	slow_node_ejection      SlowNodeEjection      duration
//	cluster_node_timeout    ClusterNodeTimeout    duration (cluster only)
//	sentinel_username       SentinelUsername      text (sentinel only)
//	sentinel_password       SentinelPassword      text (sentinel only)
//
// and every parameter of go-redis's ParseURL, ParseClusterURL and
// ParseFailoverURL, with its name and meaning, setting the Config field of
// the same name: protocol, client_name, db, addr (repeatable), dial_timeout,
// read_timeout, write_timeout, pool_timeout, pool_size (MaxConnections;
// not with max_connections), pool_fifo, min_idle_conns, max_idle_conns,
// max_active_conns, max_concurrent_dials, conn_max_idle_time (or
// idle_timeout), conn_max_lifetime (or max_conn_age),
// conn_max_lifetime_jitter, skip_verify (TLS only), disableIdentity,
// identitySuffix, unstable_resp3, max_redirects and failing_timeout_seconds
// (cluster), master_name, username and password (failover form). Those whose
// fields redisguard owns accept only what it does: max_retries=-1,
// dialer_retries=1, min_retry_backoff and max_retry_backoff of 0 or less,
// pipeline_pool_size below 0, context_timeout_enabled=true; dialer_retry_timeout
// and the pipeline buffer sizes are refused. go-redis's replica switches
// (read_only, route_by_latency, route_randomly, replica_only,
// use_disconnected_replicas) may only be false, and route_by_latency_tolerance
// is refused: replicas are read with read_from. docs/options.md has the
// reasons.
//
// A duration is a Go duration such as 250ms, or, as in go-redis, a whole
// number of seconds. For redisguard's durations zero means the default, as
// in Config; go-redis reads a zero or negative timeout as "no timeout",
// which redisguard has not, so those are refused, and a zero or negative
// conn_max_idle_time or conn_max_lifetime means "never", as in go-redis.
//
// Every parameter but addr may appear once, and each needs a value. Unknown parameters are
// errors, so a typo cannot silently leave a default in place. Values and
// user info are percent-decoded; a '+' is a literal plus, never a space, so
// that a base64 password survives. Percent-encode '@', '/', '?', '#', '&'
// and '%' inside a password or value.
//
// ParseURL validates the result as NewClient would, but returns the Config
// without defaults filled in: fields the URL does not mention stay zero, so
// the Config says exactly what the URL said. Every error wraps
// ErrInvalidConfig and names the part or parameter at fault. Errors number
// hosts rather than quote them, and quote no input but the name of an
// unknown parameter, withheld too when it could be part of a password. So
// the password, the sentinel password and the rest of the user info never
// appear in an error, even in a URL mangled by an unencoded character.
func ParseURL(s string) (Config, error) {
	cfg, err := parseURL(s)
	if err != nil {
		return Config{}, err
	}
	if _, err := cfg.resolve(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// urlScheme is what a scheme decides.
type urlScheme struct {
	mode        Mode
	tls         bool
	defaultPort string
}

var urlSchemes = map[string]urlScheme{
	"redis":           {ModeAuto, false, "6379"},
	"rediss":          {ModeAuto, true, "6379"},
	"redis+sentinel":  {ModeSentinel, false, "26379"},
	"rediss+sentinel": {ModeSentinel, true, "26379"},
	"redis+cluster":   {ModeCluster, false, "6379"},
	"rediss+cluster":  {ModeCluster, true, "6379"},
}

const urlSchemeList = "redis, rediss, redis+sentinel, rediss+sentinel, redis+cluster or rediss+cluster"

// parseURL splits the URL by hand rather than with net/url: url.Parse
// rejects host lists such as "[::1]:1,[::2]:2", and its errors quote the
// whole input, password included.
func parseURL(s string) (Config, error) {
	if s == "" {
		return Config{}, invalid("URL", "is empty (is the environment variable that holds it set?)")
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] == 0x7f {
			return Config{}, invalid("URL", "has a space or control character at byte %d (a trailing newline?); percent-encode it", i)
		}
	}
	// A '#' is almost always an unencoded character of a password; treating
	// the rest as a fragment would silently cut the password short.
	if strings.IndexByte(s, '#') >= 0 {
		return Config{}, invalid("URL", "contains '#'; fragments are not supported, and a '#' in a password must be written %%23")
	}
	name, rest, ok := strings.Cut(s, "://")
	if !ok {
		return Config{}, invalid("URL", "does not start with a scheme such as redis://")
	}
	scheme, ok := urlSchemes[strings.ToLower(name)]
	if !ok {
		return Config{}, invalid("URL scheme", "is not %s", urlSchemeList)
	}

	authority, rest := rest, ""
	if i := strings.IndexAny(authority, "/?"); i >= 0 {
		authority, rest = authority[:i], authority[i:]
	}
	// An '@' after the host list means a '/' or '?' in the user info ended
	// the authority early, and what looks like a host or a path is really
	// part of the password. Refusing it here keeps the password out of every
	// later error message.
	if strings.IndexByte(rest, '@') >= 0 {
		return Config{}, invalid("URL", "has an '@' after the host list; percent-encode '/', '?' and '@' in the user name, password and parameter values")
	}

	cfg := Config{Mode: scheme.mode}
	hosts := authority
	if i := strings.LastIndexByte(authority, '@'); i >= 0 {
		user, pass, hasPass := strings.Cut(authority[:i], ":")
		var err error
		if cfg.Username, err = url.PathUnescape(user); err != nil {
			return Config{}, invalid("URL user name", "has invalid percent-encoding")
		}
		if hasPass {
			if cfg.Password, err = url.PathUnescape(pass); err != nil {
				return Config{}, invalid("URL password", "has invalid percent-encoding")
			}
		}
		hosts = authority[i+1:]
	}

	firstHost, err := parseHosts(&cfg, hosts, scheme)
	if err != nil {
		return Config{}, err
	}
	if scheme.tls {
		cfg.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		if cfg.Mode == ModeAuto {
			cfg.TLSConfig.ServerName = firstHost
		}
	}

	path, query, _ := strings.Cut(rest, "?")
	if err := parsePath(&cfg, path); err != nil {
		return Config{}, err
	}
	if err := parseQuery(&cfg, query, authority); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// parseHosts fills cfg.Addrs from a comma-separated host list and returns the
// first host name (without port or brackets), for TLS.
func parseHosts(cfg *Config, list string, scheme urlScheme) (string, error) {
	if list == "" {
		return "", invalid("URL host", "is missing")
	}
	entries := strings.Split(list, ",")
	if scheme.mode == ModeAuto && len(entries) > 1 {
		return "", invalid("URL host", "list has %d hosts; redis:// takes one (use redis+cluster:// or redis+sentinel:// for several)", len(entries))
	}
	var first string
	for i, e := range entries {
		host, port, reason := splitURLHost(e, scheme.defaultPort)
		if reason != "" && len(entries) == 1 {
			return "", invalid("URL host", "%s", reason)
		}
		if reason != "" {
			return "", invalid("URL host", "%d of %d %s", i+1, len(entries), reason)
		}
		if i == 0 {
			first, _, _ = strings.Cut(host, "%") // a zone is no part of a name
		}
		cfg.Addrs = append(cfg.Addrs, net.JoinHostPort(host, port))
	}
	return first, nil
}

// splitURLHost parses "host", "host:port", "[v6]" or "[v6]:port". It
// reports a problem as a reason that quotes nothing.
func splitURLHost(s, defaultPort string) (host, port, reason string) {
	var ok bool
	if s == "" {
		return "", "", "is empty"
	}
	port = defaultPort
	if s[0] == '[' {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", "", "has '[' without ']'"
		}
		host, s = s[1:end], s[end+1:]
		// RFC 6874 writes an IPv6 zone as %25, the encoded '%'.
		ip, zone, hasZone := strings.Cut(host, "%25")
		a, err := netip.ParseAddr(ip)
		if err != nil || !a.Is6() || strings.IndexByte(ip, '%') >= 0 {
			return "", "", "is not a valid IPv6 address in brackets"
		}
		if hasZone {
			if !isHostName(zone) {
				return "", "", "has an invalid IPv6 zone"
			}
			host = ip + "%" + zone
		}
		if s != "" {
			if s[0] != ':' {
				return "", "", "has characters after ']' that are not a port"
			}
			if port, ok = canonicalPort(s[1:]); !ok {
				return "", "", "has a port that is not a number from 1 to 65535"
			}
		}
		return host, port, ""
	}
	host = s
	if i := strings.IndexByte(s, ':'); i >= 0 {
		host = s[:i]
		if strings.IndexByte(s[i+1:], ':') >= 0 {
			return "", "", "has more than one ':'; write an IPv6 address in brackets, e.g. [::1]:6379"
		}
		if port, ok = canonicalPort(s[i+1:]); !ok {
			return "", "", "has a port that is not a number from 1 to 65535"
		}
	}
	if !isHostName(host) {
		return "", "", "is not a host name or IPv4 address (letters, digits, '.', '-' and '_')"
	}
	return host, port, ""
}

func isHostName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// canonicalPort accepts 1 to 65535 and drops leading zeros, so that "06379"
// and "6379" give the same address and the same breaker.
func canonicalPort(s string) (string, bool) {
	if len(s) > 5 || !isDigits(s) {
		return "", false
	}
	n, _ := strconv.Atoi(s)
	if n < 1 || n > 65535 {
		return "", false
	}
	return strconv.Itoa(n), true
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// parsePath reads the database number, and for Sentinel the master name.
func parsePath(cfg *Config, path string) error {
	path = strings.TrimPrefix(path, "/")
	var segs []string
	if path != "" {
		segs = strings.Split(path, "/")
	}
	var db []string // the database segment, if any
	switch cfg.Mode {
	case ModeCluster:
		if len(segs) > 0 {
			return invalid("URL path", "must be empty: Redis Cluster has only database 0 and no master name")
		}
	case ModeSentinel:
		if len(segs) == 0 || len(segs) > 2 || segs[0] == "" {
			return invalid("URL path", "must be /<master name> or /<master name>/<db>")
		}
		name, err := url.PathUnescape(segs[0])
		if err != nil {
			return invalid("URL master name", "has invalid percent-encoding")
		}
		if len(segs) == 1 && isDigits(segs[0]) {
			// redis+sentinel://host/0 reads like a database number, as in
			// redis://host/0; taken as a master name it would fail later
			// with the sentinels' puzzling answer.
			return invalid("URL path", "/%s is ambiguous: a Sentinel URL's path is /<master name>[/<db>]; write /<master name>/%s for database %s, or, for a master named %s, percent-encode its first digit (/%%%02X%s)", name, name, name, name, name[0], name[1:])
		}
		cfg.MasterName = name
		db = segs[1:]
	default:
		if len(segs) > 1 {
			return invalid("URL path", "must be empty or /<db>")
		}
		db = segs
	}
	if len(db) == 0 {
		return nil
	}
	n, err := strconv.Atoi(db[0])
	if err != nil || !isDigits(db[0]) {
		return invalid("URL database number", "is not a whole number >= 0")
	}
	cfg.DB = n
	return nil
}

// parseQuery applies the parameters in order. It parses the query itself
// rather than with url.ParseQuery to catch repeats, to keep '+' literal,
// and to tell a missing '=' from an empty value. authority is the raw
// user info and host list, whose password must not be quoted.
func parseQuery(cfg *Config, query, authority string) error {
	segs := strings.Split(query, "&")
	secrets := urlSecrets(cfg, authority, segs)
	failover := cfg.Mode == ModeAuto && hasParam(segs, "master_name")
	if failover {
		// go-redis's ParseFailoverURL form: the hosts are sentinels, the
		// user info their credentials, and the master's come in the
		// username and password parameters.
		cfg.Mode = ModeSentinel
		cfg.SentinelUsername, cfg.SentinelPassword = cfg.Username, cfg.Password
		cfg.Username, cfg.Password = "", ""
		if cfg.TLSConfig != nil {
			cfg.TLSConfig.ServerName = "" // see ParseURL: each dial verifies its own name
		}
	}
	seen := make(map[string]bool)
	for _, seg := range segs {
		if seg == "" {
			continue // "?a=1&" and "?&a=1" are harmless
		}
		rawKey, rawVal, hasEq := strings.Cut(seg, "=")
		key, err := url.PathUnescape(rawKey)
		if err != nil {
			return invalid("URL parameter", "name has invalid percent-encoding")
		}
		p, ok := urlParams[key]
		if !ok {
			// The name of an unknown parameter is the one piece of input an
			// error quotes. It is withheld when it could be a secret: a
			// segment without '=' is most likely the tail of a value with an
			// unencoded '&', and a name that overlaps a password is one.
			if hasEq && isParamName(key) && !overlapsAny(key, secrets) {
				return invalid("URL parameter "+key, "is unknown (ParseURL lists the supported parameters)")
			}
			return invalid("URL parameter", "is unknown; its name is not shown because it may be part of a password")
		}
		field := "URL parameter " + key
		if seen[key] && !p.repeat {
			return invalid(field, "is repeated")
		}
		seen[key] = true
		if err := p.allowed(cfg.Mode, failover); err != nil {
			return invalid(field, "%v", err)
		}
		if rawVal == "" {
			return invalid(field, "has no value")
		}
		val, err := url.PathUnescape(rawVal)
		if err != nil {
			return invalid(field, "has invalid percent-encoding")
		}
		if err := p.set(cfg, val); err != nil {
			return invalid(field, "%v", err)
		}
	}
	if seen["pool_size"] && seen["max_connections"] {
		return invalid("URL parameter pool_size", "is go-redis's name for max_connections; give one of the two")
	}
	for _, alias := range [][2]string{{"idle_timeout", "conn_max_idle_time"}, {"max_conn_age", "conn_max_lifetime"}} {
		if seen[alias[0]] && seen[alias[1]] {
			return invalid("URL parameter "+alias[0], "is go-redis's old name for %s; give one of the two", alias[1])
		}
	}
	if seen["conn_max_lifetime_jitter"] {
		// As go-redis: the jitter never exceeds the lifetime.
		cfg.ConnMaxLifetimeJitter = max(min(cfg.ConnMaxLifetimeJitter, cfg.ConnMaxLifetime), 0)
	}
	return nil
}

// hasParam reports whether a parameter named key appears in segs.
func hasParam(segs []string, key string) bool {
	for _, seg := range segs {
		k, _, _ := strings.Cut(seg, "=")
		if k, _ = url.PathUnescape(k); k == key {
			return true
		}
	}
	return false
}

func isParamName(s string) bool {
	if s == "" || len(s) > 40 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// urlSecrets lists the password and every sentinel_password and password
// value, both as written and decoded, so that no error quotes text that
// matches them.
func urlSecrets(cfg *Config, authority string, segs []string) []string {
	secrets := []string{cfg.Password}
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		if _, pass, ok := strings.Cut(authority[:at], ":"); ok {
			secrets = append(secrets, pass)
		}
	}
	for _, seg := range segs {
		rawKey, rawVal, _ := strings.Cut(seg, "=")
		if key, _ := url.PathUnescape(rawKey); key == "sentinel_password" || key == "password" {
			val, _ := url.PathUnescape(rawVal)
			secrets = append(secrets, rawVal, val)
		}
	}
	return secrets
}

// overlapsAny reports whether s contains, or is contained in, a non-empty
// secret: quoting either would reveal some or all of it.
func overlapsAny(s string, secrets []string) bool {
	for _, sec := range secrets {
		if sec != "" && (strings.Contains(s, sec) || strings.Contains(sec, s)) {
			return true
		}
	}
	return false
}
