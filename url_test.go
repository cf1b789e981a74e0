package redisguard

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func tls12(serverName string) *tls.Config {
	return &tls.Config{ServerName: serverName, MinVersion: tls.VersionTLS12}
}

// parseURLCases are the accepted forms, one feature each. FuzzParseURL
// seeds from them too.
var parseURLCases = []struct {
	name string
	url  string
	want Config
}{
	{"host only", "redis://localhost",
		Config{Mode: ModeAuto, Addrs: []string{"localhost:6379"}}},
	{"user, password, port and db", "redis://app:p%40ss:w%2Frd@cache.internal:6380/3",
		Config{Mode: ModeAuto, Addrs: []string{"cache.internal:6380"}, Username: "app", Password: "p@ss:w/rd", DB: 3}},
	{"password only (requirepass)", "redis://:hunter22@h",
		Config{Mode: ModeAuto, Addrs: []string{"h:6379"}, Password: "hunter22"}},
	{"user only", "redis://app@h",
		Config{Mode: ModeAuto, Addrs: []string{"h:6379"}, Username: "app"}},
	{"raw '@' and ':' in the password", "redis://u:a@b:c@h",
		Config{Mode: ModeAuto, Addrs: []string{"h:6379"}, Username: "u", Password: "a@b:c"}},
	{"plus is literal in a password", "redis://:a+b%2Bc@h",
		Config{Mode: ModeAuto, Addrs: []string{"h:6379"}, Password: "a+b+c"}},
	{"IPv6 with port", "redis://[::1]:6379/1",
		Config{Mode: ModeAuto, Addrs: []string{"[::1]:6379"}, DB: 1}},
	{"IPv6 without port", "redis://[::1]",
		Config{Mode: ModeAuto, Addrs: []string{"[::1]:6379"}}},
	{"IPv6 with zone", "redis://[fe80::1%25eth0]:7000",
		Config{Mode: ModeAuto, Addrs: []string{"[fe80::1%eth0]:7000"}}},
	{"IPv4", "redis://10.0.0.7:7001",
		Config{Mode: ModeAuto, Addrs: []string{"10.0.0.7:7001"}}},
	{"scheme is case-insensitive, port loses leading zeros", "REDIS://h:06379",
		Config{Mode: ModeAuto, Addrs: []string{"h:6379"}}},
	{"trailing slash is db 0", "redis://h/",
		Config{Mode: ModeAuto, Addrs: []string{"h:6379"}}},
	{"every common parameter",
		"redis://h?dial_timeout=1s&read_timeout=250ms&write_timeout=2s&pool_timeout=4s&max_connections=20" +
			"&max_long_connections=5&node_failure_threshold=3&node_recovery_time=30s&health_write_ttl=1m&client_name=api-1",
		Config{Mode: ModeAuto, Addrs: []string{"h:6379"},
			DialTimeout: time.Second, ReadTimeout: 250 * time.Millisecond, WriteTimeout: 2 * time.Second,
			PoolTimeout: 4 * time.Second, MaxConnections: 20, MaxLongConnections: 5, NodeFailureThreshold: 3,
			NodeRecoveryTime: 30 * time.Second, HealthWriteTTL: time.Minute, ClientName: "api-1"}},
	{"slow-node parameters", "redis://h?slow_node_factor=2.5&slow_node_floor=3ms&slow_node_mark_after=2s&slow_node_ejection=10s",
		Config{Mode: ModeAuto, Addrs: []string{"h:6379"}, SlowNodeFactor: 2.5, SlowNodeFloor: 3 * time.Millisecond,
			SlowNodeMarkAfter: 2 * time.Second, SlowNodeEjection: 10 * time.Second}},
	{"negative slow-node factor turns marking off", "redis://h?slow_node_factor=-1",
		Config{Mode: ModeAuto, Addrs: []string{"h:6379"}, SlowNodeFactor: -1}},
	{"negative threshold turns breakers off", "redis://h?node_failure_threshold=-1",
		Config{Mode: ModeAuto, Addrs: []string{"h:6379"}, NodeFailureThreshold: -1}},
	{"zero duration and count mean default", "redis://h?node_recovery_time=0s&max_connections=0",
		Config{Mode: ModeAuto, Addrs: []string{"h:6379"}}},
	{"empty query segments are ignored", "redis://h?&dial_timeout=1s&",
		Config{Mode: ModeAuto, Addrs: []string{"h:6379"}, DialTimeout: time.Second}},
	{"percent-encoded parameter name and value", "redis://h?client%5Fname=a%2Bb+c",
		Config{Mode: ModeAuto, Addrs: []string{"h:6379"}, ClientName: "a+b+c"}},
	{"rediss sets ServerName", "rediss://u:pw@cache.example.com:6380",
		Config{Mode: ModeAuto, Addrs: []string{"cache.example.com:6380"}, Username: "u", Password: "pw",
			TLSConfig: tls12("cache.example.com")}},
	{"rediss IPv6 ServerName has no brackets", "rediss://[::1]:6380",
		Config{Mode: ModeAuto, Addrs: []string{"[::1]:6380"}, TLSConfig: tls12("::1")}},
	{"sentinel hosts default to 26379", "redis+sentinel://s1,s2:26380,[::1]/mymaster",
		Config{Mode: ModeSentinel, Addrs: []string{"s1:26379", "s2:26380", "[::1]:26379"}, MasterName: "mymaster"}},
	{"sentinel master credentials, db and sentinel credentials",
		"redis+sentinel://app:masterpw@s1/my%2Fmaster/2?sentinel_username=sent&sentinel_password=s%26pw",
		Config{Mode: ModeSentinel, Addrs: []string{"s1:26379"}, MasterName: "my/master", DB: 2,
			Username: "app", Password: "masterpw", SentinelUsername: "sent", SentinelPassword: "s&pw"}},
	{"rediss+sentinel leaves ServerName to each dial", "rediss+sentinel://s1/m",
		Config{Mode: ModeSentinel, Addrs: []string{"s1:26379"}, MasterName: "m", TLSConfig: tls12("")}},
	{"cluster seeds and cluster parameters", "redis+cluster://n1:7000,n2:7001,n3?max_redirects=5&cluster_node_timeout=5s",
		Config{Mode: ModeCluster, Addrs: []string{"n1:7000", "n2:7001", "n3:6379"},
			MaxRedirects: 5, ClusterNodeTimeout: 5 * time.Second}},
	{"cluster with one seed and a trailing slash", "redis+cluster://n1:7000/",
		Config{Mode: ModeCluster, Addrs: []string{"n1:7000"}}},
	{"rediss+cluster leaves ServerName to each dial", "rediss+cluster://:pw@n1:7000",
		Config{Mode: ModeCluster, Addrs: []string{"n1:7000"}, Password: "pw", TLSConfig: tls12("")}},
}

func TestParseURL(t *testing.T) {
	for _, tt := range parseURLCases {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseURL(tt.url)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
			_, err = got.resolve()
			assert.NoError(t, err)
		})
	}
}

// TestParseURLRoundTrip formats each accepted Config back into a URL and
// parses it again: ParseURL returns exactly what the URL said, with no
// defaults mixed in, so the two must be equal.
func TestParseURLRoundTrip(t *testing.T) {
	for _, tt := range parseURLCases {
		t.Run(tt.name, func(t *testing.T) {
			u := formatURL(tt.want)
			got, err := ParseURL(u)
			require.NoError(t, err, "formatted as %s", u)
			assert.Equal(t, tt.want, got, "formatted as %s", u)
		})
	}
}

func TestParseURLErrors(t *testing.T) {
	tests := []struct {
		name, url, mention string
	}{
		{"empty", "", "URL"},
		{"no scheme", "localhost:6379", "scheme"},
		{"unknown scheme", "http://h", "URL scheme"},
		{"go-redis unix scheme", "unix:///tmp/redis.sock", "URL scheme"},
		{"no host", "redis://", "URL host"},
		{"no host after user info", "redis://:pw@/0", "URL host"},
		{"several hosts for redis://", "redis://h1,h2", "URL host"},
		{"empty host in a list", "redis+cluster://h1,,h3", "URL host 2 of 3"},
		{"port zero", "redis://h:0", "URL host"},
		{"port too big", "redis://h:65536", "URL host"},
		{"port not a number", "redis://h:abc", "URL host"},
		{"empty port", "redis://h:", "URL host"},
		{"IPv6 without brackets", "redis://::1", "URL host"},
		{"unclosed bracket", "redis://[::1", "URL host"},
		{"IPv4 in brackets", "redis://[1.2.3.4]", "URL host"},
		{"junk after bracket", "redis://[::1]x", "URL host"},
		{"bad character in host", "redis://h%41st", "URL host"},
		{"db not a number", "redis://h/abc", "URL database number"},
		{"negative db", "redis://h/-1", "URL database number"},
		{"db overflows", "redis://h/99999999999999999999", "URL database number"},
		{"two path segments", "redis://h/1/2", "URL path"},
		{"sentinel without master", "redis+sentinel://h", "URL path"},
		{"sentinel path that reads as a database", "redis+sentinel://h/0", "is ambiguous"},
		{"sentinel with empty master", "redis+sentinel://h/", "URL path"},
		{"sentinel db not a number", "redis+sentinel://h/m/x", "URL database number"},
		{"sentinel trailing slash", "redis+sentinel://h/m/", "URL database number"},
		{"sentinel three segments", "redis+sentinel://h/m/1/2", "URL path"},
		{"cluster with db", "redis+cluster://h/0", "URL path"},
		{"unknown parameter", "redis://h?foo=1", "URL parameter foo"},
		{"parameter name in upper case", "redis://h?DIAL_TIMEOUT=1s", "URL parameter DIAL_TIMEOUT"},
		{"repeated parameter", "redis://h?dial_timeout=1s&dial_timeout=2s", "URL parameter dial_timeout is repeated"},
		{"parameter without '='", "redis://h?dial_timeout", "URL parameter dial_timeout has no value"},
		{"parameter with empty value", "redis://h?read_timeout=", "URL parameter read_timeout has no value"},
		{"go-redis 'no timeout' as a bare zero", "redis://h?read_timeout=0", "URL parameter read_timeout is zero or negative"},
		{"go-redis 'no timeout'", "redis://h?write_timeout=-1", "URL parameter write_timeout"},
		{"negative duration", "redis://h?node_recovery_time=-1s", "URL parameter node_recovery_time is negative"},
		{"slow-node factor not a number", "redis://h?slow_node_factor=fast", "URL parameter slow_node_factor is not a number"},
		{"slow-node factor of one", "redis://h?slow_node_factor=1", "SlowNodeFactor"},
		{"negative timeout", "redis://h?pool_timeout=-1s", "URL parameter pool_timeout is zero or negative"},
		{"not a duration", "redis://h?node_recovery_time=fast", "URL parameter node_recovery_time"},
		{"negative count", "redis://h?max_connections=-1", "URL parameter max_connections"},
		{"fractional count", "redis://h?max_long_connections=1.5", "URL parameter max_long_connections"},
		{"count overflows", "redis://h?max_connections=99999999999999999999", "URL parameter max_connections is out of range"},
		{"more connections than go-redis can pool", "redis://h?max_connections=1000000000000000", "URL parameter max_connections is more than"},
		{"connections past the limit", "redis://h?max_connections=1048577", "URL parameter max_connections is more than"},
		{"long connections past the limit", "redis+cluster://h?max_long_connections=4611686018427387904", "URL parameter max_long_connections is more than"},
		{"threshold not a number", "redis://h?node_failure_threshold=off", "URL parameter node_failure_threshold"},
		{"client name with a space", "redis://h?client_name=a%20b", "URL parameter client_name"},
		{"cluster parameter on sentinel URL", "redis+sentinel://h/m?max_redirects=3", "URL parameter max_redirects"},
		{"cluster parameter on sentinel", "redis+sentinel://h/m?cluster_node_timeout=1s", "URL parameter cluster_node_timeout"},
		{"sentinel parameter on redis://", "redis://h?sentinel_username=x", "URL parameter sentinel_username"},
		{"bad escape in value", "redis://h?client_name=%zz", "URL parameter client_name"},
		{"bad escape in name", "redis://h?%zz=1", "URL parameter"},
		{"bad escape in user", "redis://%zz@h", "URL user name"},
		{"bad escape in master", "redis+sentinel://h/%zz", "URL master name"},
		{"fragment", "redis://h/0#x", "'#'"},
		{"space", "redis://h /0", "byte 9"},
		{"trailing newline", "redis://h\n", "byte 9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkURLError(t, tt.url, tt.mention) })
	}
}

// TestParseURLErrorsHideSecrets puts the password where the parser will
// choke on it as well, which is what a mistyped URL looks like. net/url would
// quote the whole URL here ("parse \"redis://:…\": invalid port"), which is
// why ParseURL does its own splitting.
func TestParseURLErrorsHideSecrets(t *testing.T) {
	const pw = "Tr0ub4dor"
	tests := []struct{ name, url string }{
		{"password as the port", "redis://:" + pw + "@h:" + pw},
		{"password as a host", "redis://:" + pw + "@" + pw + ":x"},
		{"password as a db", "redis://:" + pw + "@h/" + pw},
		{"password as a master name and db", "redis+sentinel://:" + pw + "@h/" + pw + "/" + pw},
		{"password as a parameter name", "redis://:" + pw + "@h?" + pw + "=1"},
		{"password in a parameter name", "redis://:" + pw + "@h?x" + pw + "x=1"},
		{"part of the password as a parameter name", "redis://:" + pw + "@h?" + pw[:5] + "=1"},
		{"decoded password as a parameter name", "redis://:Tr0ub%34dor@h?" + pw + "=1"},
		{"password as a parameter value", "redis://:" + pw + "@h?dial_timeout=" + pw},
		{"unencoded '/' in the password", "redis://:Tr0u/b4dor@h"},
		{"unencoded '?' in the password", "redis://:Tr0u?b4dor=1@h"},
		{"unencoded '#' in the password", "redis://:Tr0u#b4dor@h"},
		{"bad escape in the password", "redis://:" + pw + "%zz@h"},
		{"sentinel password repeated", "redis+sentinel://h/m?sentinel_password=" + pw + "&sentinel_password=" + pw},
		{"sentinel password as a parameter name", "redis+sentinel://h/m?" + pw + "=1&sentinel_password=" + pw},
		{"unencoded '&' in the sentinel password", "redis+sentinel://h/m?sentinel_password=Tr0u&b4dor"},
		{"sentinel password on redis://", "redis://h?sentinel_password=" + pw},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseURL(tt.url)
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrInvalidConfig))
			for _, part := range []string{pw, "Tr0u", "b4dor"} {
				assert.NotContains(t, err.Error(), part)
			}
		})
	}
}

// TestParseURLFeedsNewClient checks the result is something NewClient
// takes as is, in every mode. redis:// leaves the mode to the server, which
// here cannot be reached: the client runs Standalone.
func TestParseURLFeedsNewClient(t *testing.T) {
	for _, tt := range []struct {
		url  string
		mode Mode
	}{
		{"redis://:pw@127.0.0.1:1/2?max_connections=3", ModeStandalone},
		{"rediss+sentinel://127.0.0.1:1/m?sentinel_password=x", ModeSentinel},
		{"redis+cluster://127.0.0.1:1,127.0.0.1:2?max_redirects=1", ModeCluster},
	} {
		t.Run(tt.url, func(t *testing.T) {
			cfg, err := ParseURL(tt.url)
			require.NoError(t, err)
			c, err := NewClient(cfg)
			require.NoError(t, err)
			assert.Equal(t, tt.mode, c.Mode())
			require.NoError(t, c.Close())
		})
	}
}

func FuzzParseURL(f *testing.F) {
	for _, tt := range parseURLCases {
		f.Add(tt.url)
	}
	for _, tt := range goRedisURLCases {
		f.Add(tt.url)
	}
	f.Add("redis://h?max_connections=1048576&max_long_connections=1048576")
	f.Add("redis+sentinel://h/m?max_connections=1000000000000000")
	f.Add("redis+cluster://h?max_long_connections=4611686018427387904")
	f.Fuzz(func(t *testing.T, s string) {
		cfg, err := ParseURL(s)
		secrets := fuzzSecrets(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("error %q does not wrap ErrInvalidConfig", err)
			}
			if !reflect.DeepEqual(cfg, Config{}) {
				t.Fatalf("failed parse returned %+v", cfg)
			}
			assertNoSecret(t, s, err, secrets)
			return
		}
		if _, err := cfg.resolve(); err != nil {
			t.Fatalf("parsed Config does not validate: %v", err)
		}
		// What ParseURL accepts, NewClient builds without a panic (go-redis
		// panics on a pool it cannot size) and without dialling: with
		// ModeAuto and one address it would ask that server first.
		build := cfg
		if build.Mode == ModeAuto && len(build.Addrs) == 1 {
			build.Mode = ModeStandalone
		}
		c, err := NewClient(build)
		if err != nil {
			t.Fatalf("NewClient refuses the parsed Config: %v", err)
		}
		_ = c.Close()
		if pass, ok := fuzzPassword(s); ok {
			got := cfg.Password
			if cfg.Mode == ModeSentinel && !strings.Contains(strings.SplitN(s, "://", 2)[0], "+") {
				got = cfg.SentinelPassword // go-redis's failover form: the user info is the sentinels'
			}
			if dec, _ := url.PathUnescape(pass); got != dec {
				t.Fatalf("the test reads the password as %q, ParseURL as %q", dec, got)
			}
		}
		again, err := ParseURL(formatURL(cfg))
		if err != nil {
			t.Fatalf("formatURL(%+v) = %s does not parse: %v", cfg, formatURL(cfg), err)
		}
		if !reflect.DeepEqual(cfg, again) {
			t.Fatalf("round trip through %s:\n got %+v\nwant %+v", formatURL(cfg), again, cfg)
		}
	})
}

// assertNoSecret fails if err quotes a secret of four bytes or more. The
// fixed wording of an error may contain a short secret by chance (a password
// "host" in "URL host"), so a secret found in err counts as leaked only if it
// is absent from the error for the same URL with every copy of every secret
// replaced by a look-alike that breaks the URL in the same way.
func assertNoSecret(t *testing.T, s string, err error, secrets []string) {
	t.Helper()
	for _, sec := range secrets {
		if len(sec) < 4 || !strings.Contains(err.Error(), sec) {
			continue
		}
		masked := s
		for _, other := range secrets {
			if other != "" {
				masked = strings.ReplaceAll(masked, other, lookAlike(other))
			}
		}
		_, base := ParseURL(masked)
		if base == nil || !strings.Contains(base.Error(), sec) {
			t.Fatalf("error %q quotes the secret %q", err, sec)
		}
	}
}

// lookAlike swaps letters and digits for others of the same kind (hex
// digits stay hex digits) and keeps every other byte, so a percent-escape
// stays valid or invalid and the URL's structure does not change.
func lookAlike(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case '0' <= c && c <= '9':
			b[i] = '7'
		case 'a' <= c && c <= 'f':
			b[i] = 'e'
		case 'A' <= c && c <= 'F':
			b[i] = 'E'
		case 'g' <= c && c <= 'z':
			b[i] = 'q'
		case 'G' <= c && c <= 'Z':
			b[i] = 'Q'
		}
	}
	return string(b)
}

// fuzzSecrets finds the secrets in s the way a reader of the URL would: the
// user info password and every sentinel_password and password value, each decoded first
// (when it decodes) and then as written. It is written independently of
// ParseURL, to cross-check it.
func fuzzSecrets(s string) []string {
	var raw []string
	if pass, ok := fuzzPassword(s); ok && pass != "" {
		raw = append(raw, pass)
	}
	_, rest, _ := strings.Cut(s, "://")
	tail := ""
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		tail = rest[i:]
	}
	if _, query, ok := strings.Cut(tail, "?"); ok {
		for _, seg := range strings.Split(query, "&") {
			k, v, _ := strings.Cut(seg, "=")
			if key, _ := url.PathUnescape(k); (key == "sentinel_password" || key == "password") && v != "" {
				raw = append(raw, v)
			}
		}
	}
	var secrets []string
	for _, r := range raw {
		if dec, err := url.PathUnescape(r); err == nil {
			secrets = append(secrets, dec)
		}
		secrets = append(secrets, r)
	}
	return secrets
}

// fuzzPassword returns the user info password of s as written: after the
// first ':' of what precedes the last '@' of the authority, which ends at the
// first '/' or '?'.
func fuzzPassword(s string) (string, bool) {
	_, rest, ok := strings.Cut(s, "://")
	if !ok {
		return "", false
	}
	authority := rest
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		authority = rest[:i]
	}
	at := strings.LastIndexByte(authority, '@')
	if at < 0 {
		return "", false
	}
	_, pass, ok := strings.Cut(authority[:at], ":")
	return pass, ok
}

// formatURL writes cfg as a URL that ParseURL reads back to cfg, for the
// round-trip tests. It is not part of the API: a Config-to-URL method would
// put the password in a string that begs to be logged.
func formatURL(cfg Config) string {
	// QueryEscape escapes every reserved byte; its '+' for a space would
	// read back as a plus, so spaces become %20.
	esc := func(s string) string { return strings.ReplaceAll(url.QueryEscape(s), "+", "%20") }

	scheme := map[Mode]string{ModeAuto: "redis", ModeStandalone: "redis", ModeSentinel: "redis+sentinel", ModeCluster: "redis+cluster"}[cfg.Mode]
	if cfg.TLSConfig != nil {
		scheme = "rediss" + strings.TrimPrefix(scheme, "redis")
	}
	var b strings.Builder
	b.WriteString(scheme + "://")
	if cfg.Username != "" || cfg.Password != "" {
		b.WriteString(esc(cfg.Username) + ":" + esc(cfg.Password) + "@")
	}
	var q []string
	for i, a := range cfg.Addrs {
		host, port, _ := net.SplitHostPort(a)
		if strings.Contains(host, ":") {
			host = "[" + strings.Replace(host, "%", "%25", 1) + "]"
		}
		switch {
		case i == 0:
			b.WriteString(host + ":" + port)
		case cfg.Mode == ModeAuto: // go-redis's cluster form
			q = append(q, "addr="+host+":"+port)
		default:
			b.WriteString("," + host + ":" + port)
		}
	}
	if cfg.Mode == ModeSentinel {
		name := esc(cfg.MasterName)
		if cfg.DB == 0 && isDigits(name) {
			// Alone in the path, a name of digits reads as a database
			// number; ParseURL asks for its first digit percent-encoded.
			name = fmt.Sprintf("%%%02X", name[0]) + name[1:]
		}
		b.WriteString("/" + name)
	}
	if cfg.DB != 0 {
		b.WriteString("/" + strconv.Itoa(cfg.DB))
	}
	dur := func(name string, d time.Duration) {
		if d != 0 {
			q = append(q, name+"="+d.String())
		}
	}
	num := func(name string, n int) {
		if n != 0 {
			q = append(q, name+"="+strconv.Itoa(n))
		}
	}
	str := func(name, v string) {
		if v != "" {
			q = append(q, name+"="+esc(v))
		}
	}
	dur("dial_timeout", cfg.DialTimeout)
	dur("read_timeout", cfg.ReadTimeout)
	dur("write_timeout", cfg.WriteTimeout)
	dur("pool_timeout", cfg.PoolTimeout)
	num("max_connections", cfg.MaxConnections)
	num("max_long_connections", cfg.MaxLongConnections)
	num("node_failure_threshold", cfg.NodeFailureThreshold)
	dur("node_recovery_time", cfg.NodeRecoveryTime)
	dur("hung_node_after", cfg.HungNodeAfter)
	dur("health_write_ttl", cfg.HealthWriteTTL)
	if cfg.SlowNodeFactor != 0 {
		q = append(q, "slow_node_factor="+strconv.FormatFloat(cfg.SlowNodeFactor, 'g', -1, 64))
	}
	dur("slow_node_floor", cfg.SlowNodeFloor)
	dur("slow_node_mark_after", cfg.SlowNodeMarkAfter)
	dur("slow_node_ejection", cfg.SlowNodeEjection)
	str("client_name", cfg.ClientName)
	num("max_redirects", cfg.MaxRedirects)
	dur("cluster_node_timeout", cfg.ClusterNodeTimeout)
	str("sentinel_username", cfg.SentinelUsername)
	str("sentinel_password", cfg.SentinelPassword)
	flag := func(name string, on bool) {
		if on {
			q = append(q, name+"=true")
		}
	}
	num("protocol", cfg.Protocol)
	num("pool_size", cfg.PoolSize)
	flag("pool_fifo", cfg.PoolFIFO)
	num("min_idle_conns", cfg.MinIdleConns)
	num("max_idle_conns", cfg.MaxIdleConns)
	num("max_active_conns", cfg.MaxActiveConns)
	num("max_concurrent_dials", cfg.MaxConcurrentDials)
	dur("conn_max_idle_time", cfg.ConnMaxIdleTime)
	dur("conn_max_lifetime", cfg.ConnMaxLifetime)
	dur("conn_max_lifetime_jitter", cfg.ConnMaxLifetimeJitter)
	flag("disableIdentity", cfg.DisableIdentity)
	str("identitySuffix", cfg.IdentitySuffix)
	flag("unstable_resp3", cfg.UnstableResp3)
	num("failing_timeout_seconds", cfg.FailingTimeoutSeconds)
	num("max_retries", cfg.MaxRetries)
	dur("min_retry_backoff", cfg.MinRetryBackoff)
	dur("max_retry_backoff", cfg.MaxRetryBackoff)
	num("dialer_retries", cfg.DialerRetries)
	num("pipeline_pool_size", cfg.PipelinePoolSize)
	flag("context_timeout_enabled", cfg.ContextTimeoutEnabled)
	if cfg.TLSConfig != nil {
		flag("skip_verify", cfg.TLSConfig.InsecureSkipVerify)
	}
	if len(q) > 0 {
		b.WriteString("?" + strings.Join(q, "&"))
	}
	return b.String()
}

// An empty URL (an unset environment variable) says so; a Sentinel URL whose
// path is only a number says how to write what was meant, and a master name
// made of digits can still be written.
func TestParseURLSaysWhatWasMeant(t *testing.T) {
	_, err := ParseURL("")
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), "is empty")

	_, err = ParseURL("redis+sentinel://h:26379/0")
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), "/<master name>/0")
	assert.Contains(t, err.Error(), "/%30")

	cfg, err := ParseURL("redis+sentinel://h:26379/%30")
	require.NoError(t, err)
	assert.Equal(t, "0", cfg.MasterName)
}

// checkURLError asserts that url is refused with an error wrapping
// ErrInvalidConfig that mentions mention, and no partial Config.
func checkURLError(t *testing.T, url, mention string) {
	t.Helper()
	cfg, err := ParseURL(url)
	require.Error(t, err)
	assert.True(t, errors.Is(err, ErrInvalidConfig), "%q does not wrap ErrInvalidConfig", err)
	assert.Contains(t, err.Error(), mention)
	assert.Equal(t, Config{}, cfg, "a failed parse returns no partial Config")
}
