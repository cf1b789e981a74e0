package redisguard

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/redistest"
)

// Credentials hygiene: whatever goes wrong (a wrong password, a dead node, a
// paused node, a malformed URL), no error, log line, event, health report or
// Stats snapshot carries the password, whether it came from Config or from a
// URL, and neither in plain nor in URL-encoded form.

// hygienePassword has characters a URL must escape, so the encoded form
// differs from the plain one and both are checked.
const hygienePassword = "hyg1ene:P@ss/w0rd%Secret"

// hygieneCapture records everything a client says: its log (text and JSON
// handlers, at debug level) and its events.
type hygieneCapture struct {
	mu     sync.Mutex
	logs   bytes.Buffer // guarded by mu
	events []Event      // guarded by mu
}

func (h *hygieneCapture) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.logs.Write(p)
}

// attach points cfg's Logger and OnEvent at h.
func (h *hygieneCapture) attach(cfg *Config) {
	opts := &slog.HandlerOptions{Level: slog.LevelDebug}
	text, js := slog.NewTextHandler(h, opts), slog.NewJSONHandler(h, opts)
	cfg.Logger = slog.New(teeHandler{text, js})
	cfg.OnEvent = func(e Event) {
		h.mu.Lock()
		h.events = append(h.events, e)
		h.mu.Unlock()
	}
}

// texts returns the captured logs and every event in every rendering.
func (h *hygieneCapture) texts() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := []string{h.logs.String()}
	for _, e := range h.events {
		body, _ := json.Marshal(e)
		out = append(out, e.String(), fmt.Sprintf("%+v", e), fmt.Sprintf("%#v", e), string(body))
	}
	return out
}

// teeHandler sends every record to both handlers.
type teeHandler struct{ a, b slog.Handler }

func (t teeHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return t.a.Enabled(ctx, l) || t.b.Enabled(ctx, l)
}

func (t teeHandler) Handle(ctx context.Context, r slog.Record) error {
	_ = t.a.Handle(ctx, r.Clone())
	return t.b.Handle(ctx, r)
}

func (t teeHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return teeHandler{t.a.WithAttrs(as), t.b.WithAttrs(as)}
}

func (t teeHandler) WithGroup(name string) slog.Handler {
	return teeHandler{t.a.WithGroup(name), t.b.WithGroup(name)}
}

// exercise drives c through everything that can fail and reports: single
// commands, a pipeline, a transaction, a blocking call, a subscription,
// Healthy, Check (as JSON and text) and Stats. It returns every text a
// caller could see.
func exercise(t *testing.T, c *Client, keys []string) []string {
	t.Helper()
	var out []string
	errText := func(err error) {
		if err != nil {
			out = append(out, err.Error(), fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", err))
		}
	}
	for i, k := range keys {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		errText(c.Set(ctx, k, "v", 0).Err())
		errText(c.Get(ctx, k).Err())
		cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Incr(ctx, k+":n")
			p.Get(ctx, k)
			return nil
		})
		errText(err)
		for _, cmd := range cmds {
			errText(cmd.Err())
		}
		_, err = c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, k, "w", 0)
			return nil
		})
		errText(err)
		if i == 0 {
			errText(c.BLPop(ctx, time.Second, k+":list").Err()) // Redis's minimum
		}
		cancel()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	sub := c.Subscribe(ctx, "hygiene")
	_, err := sub.Receive(ctx)
	errText(err)
	errText(sub.Close())
	c.Healthy(ctx, "redisguard:health:hygiene")
	rep := c.Check(ctx, CheckOptions{WriteKey: "redisguard:health:hygiene"})
	body, err := json.Marshal(rep)
	require.NoError(t, err)
	out = append(out, string(body), rep.String())
	st := c.Stats()
	body, err = json.Marshal(st)
	require.NoError(t, err)
	out = append(out, string(body), fmt.Sprintf("%+v", st))
	return out
}

// assertNoSecretIn fails for the first text that holds a secret, plain or
// URL-encoded.
func assertNoSecretIn(t *testing.T, texts []string, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		for _, form := range []string{s, url.QueryEscape(s), url.PathEscape(s)} {
			for _, text := range texts {
				if !assert.NotContains(t, text, form, "a secret leaked") {
					return
				}
			}
		}
	}
}

// hygieneURL is a redis:// URL for addr with password in its user info.
func hygieneURL(addr, password string) string {
	return (&url.URL{Scheme: "redis", User: url.UserPassword("", password), Host: addr}).String()
}

func TestHygieneStandalone(t *testing.T) {
	srv := redistest.StartServer(t)
	// The harness pings without a password at start, so the password is set
	// at runtime; the admin connection stays authenticated.
	require.NoError(t, srv.Admin().ConfigSet(testCtx(t, 5*time.Second), "requirepass", hygienePassword).Err())
	dead := redistest.StartServer(t)
	deadAddr := dead.Addr
	dead.Kill(t)
	paused := redistest.StartServer(t)
	require.NoError(t, paused.Admin().ConfigSet(testCtx(t, 5*time.Second), "requirepass", hygienePassword).Err())

	wrong := hygienePassword + "-wrong"
	tests := []struct {
		name    string
		cfg     func() Config // built afresh: the capture is attached to it
		secrets []string
		pause   bool
		want    string // a text some error or event must hold: the fault reached the client
	}{
		{name: "right password in Config", cfg: func() Config {
			return Config{Addrs: []string{srv.Addr}, Password: hygienePassword}
		}, secrets: []string{hygienePassword}},
		{name: "wrong password in Config", cfg: func() Config {
			return Config{Addrs: []string{srv.Addr}, Password: wrong}
		}, secrets: []string{hygienePassword, wrong}, want: "WRONGPASS"},
		{name: "wrong password in URL", cfg: func() Config {
			cfg, err := ParseURL(hygieneURL(srv.Addr, wrong))
			require.NoError(t, err)
			return cfg
		}, secrets: []string{hygienePassword, wrong}, want: "WRONGPASS"},
		{name: "dead node", cfg: func() Config {
			cfg, err := ParseURL(hygieneURL(deadAddr, hygienePassword))
			require.NoError(t, err)
			return cfg
		}, secrets: []string{hygienePassword}, want: "connection refused"},
		{name: "paused node", cfg: func() Config {
			return Config{Addrs: []string{paused.Addr}, Password: hygienePassword}
		}, secrets: []string{hygienePassword}, pause: true, want: "breaker-opened"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg()
			cfg.ReadTimeout, cfg.DialTimeout = 300*time.Millisecond, 300*time.Millisecond
			cfg.NodeFailureThreshold, cfg.NodeRecoveryTime = 2, 200*time.Millisecond
			cfg.ClientName = "hygiene"
			var h hygieneCapture
			h.attach(&cfg)
			c := newTestClient(t, cfg)
			if tt.pause {
				paused.Pause(t)
				defer paused.Resume(t)
			}
			texts := exercise(t, c, []string{"hygiene:a", "hygiene:b", "hygiene:c"})
			require.NoError(t, c.Close())
			texts = append(texts, h.texts()...)
			if tt.want != "" {
				// The fault must have shown, or the run proves nothing.
				assert.True(t, slices.ContainsFunc(texts, func(s string) bool { return strings.Contains(s, tt.want) }),
					"nothing says %q: the fault never reached the client", tt.want)
			}
			assertNoSecretIn(t, texts, tt.secrets...)
		})
	}
}

// A Cluster whose nodes all require the password: first with the right one
// and a paused master (breaker, refresh and health events name nodes and
// carry go-redis's errors), then with a wrong one.
func TestHygieneCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster")
	}
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3, NodeTimeout: 2 * time.Second})
	for _, n := range cl.Nodes() {
		require.NoError(t, n.Admin().ConfigSet(testCtx(t, 5*time.Second), "requirepass", hygienePassword).Err())
	}
	keys := make([]string, len(cl.Masters))
	for i, m := range cl.Masters {
		keys[i] = cl.KeyOn(t, m, "hygiene")
	}
	wrong := hygienePassword + "-wrong"
	for _, tt := range []struct {
		name, password string
		pause          bool
	}{
		{name: "right password, paused master", password: hygienePassword, pause: true},
		{name: "wrong password", password: wrong},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := ParseURL("redis+cluster://:" + url.QueryEscape(tt.password) + "@" + cl.Addrs()[0] + "," + cl.Addrs()[1])
			require.NoError(t, err)
			require.Equal(t, tt.password, cfg.Password)
			cfg.ReadTimeout, cfg.DialTimeout = 300*time.Millisecond, 300*time.Millisecond
			cfg.NodeFailureThreshold, cfg.NodeRecoveryTime = 2, 200*time.Millisecond
			cfg.ClusterNodeTimeout = 2 * time.Second
			var h hygieneCapture
			h.attach(&cfg)
			c := newTestClient(t, cfg)
			if tt.pause {
				require.NoError(t, c.Ping(testCtx(t, 5*time.Second)).Err())
				cl.Masters[1].Pause(t)
				defer cl.Masters[1].Resume(t)
			}
			texts := exercise(t, c, keys)
			assert.NotEmpty(t, h.texts()[1:], "no events: the fault never reached the client")
			require.NoError(t, c.Close())
			assertNoSecretIn(t, append(texts, h.texts()...), hygienePassword, wrong)
		})
	}
}

// ParseURL's errors never echo the password, wherever the URL is broken.
func TestHygieneBadURL(t *testing.T) {
	enc := url.QueryEscape(hygienePassword)
	for i, raw := range []string{
		"redis://:" + enc + "@127.0.0.1:notaport",
		"redis://:" + enc + "@127.0.0.1:6379/notadb",
		"redis://:" + enc + "@127.0.0.1:6379/0?dial_timeout=soon",
		"redis://:" + enc + "@127.0.0.1:6379?" + enc + "=1",
		"redis://:" + hygienePassword + "@127.0.0.1:6379",
		"redis://:" + enc + "%zz@127.0.0.1:6379",
		"rediss+sentinel://:" + enc + "@h1:1,h2:2/mymaster?sentinel_password=" + enc + "&db=x",
		"redis+cluster://:" + enc + "@h1:1,h2:2/3",
		"nosuch://:" + enc + "@h1:1",
	} {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			_, err := ParseURL(raw)
			if err == nil {
				return // a URL that parses has nothing to leak here
			}
			assert.ErrorIs(t, err, ErrInvalidConfig)
			assertNoSecretIn(t, []string{err.Error(), fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", err)}, hygienePassword)
		})
	}
}

// No decision reads the goroutine's stack: what go-redis is doing is told
// by its public seams (hooks, Options callbacks, the command) and by state
// the Client keeps, never by the name of a go-redis function found among a
// goroutine's callers, which a release or a change in inlining renames.
func TestNoStackInspection(t *testing.T) {
	walk := regexp.MustCompile(`runtime\.(Callers|CallersFrames|Caller|Stack|FuncForPC)\b`)
	eachSource(t, "", func(path, src string) {
		assert.Empty(t, walk.FindAllString(src, -1), "%s reads the goroutine's stack", path)
	})
	assert.True(t, walk.MatchString("runtime.CallersFrames(pcs)"), "the pattern no longer matches a stack walk")
}

// Components hold what they use, never the Client: no struct field of the
// package refers to a Client, bare or inside another type (a *Client, an
// atomic.Pointer[Client], a slice of them). A component that must reach the
// Client's parts is built with them, or takes a function.
//
// Two fields are allowed, and named: pendingMode.up, the Cluster-mode
// Client a ModeAuto Client that started without an answer builds and
// closes (detect_pending.go), and pendingMode.build, which builds it. They
// point down to a replacement the pending mode owns, never back to the
// Client that holds it.
func TestNoFieldHoldsTheClient(t *testing.T) {
	allowed := map[string]bool{"pendingMode.up": true, "pendingMode.build": true}
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	require.NoError(t, err)
	checked, found := 0, map[string]bool{}
	for _, pkg := range pkgs {
		for name, f := range pkg.Files {
			ast.Inspect(f, func(n ast.Node) bool {
				ts, ok := n.(*ast.TypeSpec)
				if !ok {
					return true
				}
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					return true
				}
				for _, field := range st.Fields.List {
					checked++
					if !refersToClient(field.Type) {
						continue
					}
					for _, id := range field.Names {
						where := ts.Name.Name + "." + id.Name
						found[where] = true
						if !allowed[where] {
							t.Errorf("%s: %s refers to the Client (%s)", name, where, fset.Position(field.Pos()))
						}
					}
				}
				return true
			})
		}
	}
	assert.Positive(t, checked, "no struct field was looked at")
	assert.True(t, found["pendingMode.up"] && found["pendingMode.build"], "the check no longer sees the fields it allows")
	for _, src := range []string{"*Client", "atomic.Pointer[Client]", "[]*Client", "map[string]*Client"} {
		expr, err := parser.ParseExpr(src)
		require.NoError(t, err)
		assert.True(t, refersToClient(expr), "%s is not seen", src)
	}
	for _, src := range []string{"*redis.Client", "atomic.Pointer[redis.Client]", "*core"} {
		expr, err := parser.ParseExpr(src)
		require.NoError(t, err)
		assert.False(t, refersToClient(expr), "%s is taken for the Client", src)
	}
}

// refersToClient reports whether the type expression typ names this
// package's Client anywhere in it (go-redis's redis.Client is not it).
func refersToClient(typ ast.Expr) bool {
	refers := false
	ast.Inspect(typ, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.SelectorExpr:
			return false // another package's name
		case *ast.Ident:
			if x.Name == "Client" {
				refers = true
			}
		}
		return !refers
	})
	return refers
}

// RESP is read and written in one place, internal/resp: no other code of
// the module spells the protocol's line ends, which any hand-written reader
// or writer of RESP does.
func TestRESPInOnePackage(t *testing.T) {
	lineEnd := regexp.MustCompile(`\\r\\n|'\\r'`)
	eachSource(t, filepath.Join("internal", "resp"), func(path, src string) {
		for i, line := range strings.Split(src, "\n") {
			if trimmed := strings.TrimSpace(line); !strings.HasPrefix(trimmed, "//") && lineEnd.MatchString(line) {
				t.Errorf("%s:%d spells RESP's line end: %s", path, i+1, trimmed)
			}
		}
	})
	assert.True(t, lineEnd.MatchString(`"*1\r\n"`), "the pattern no longer matches a line end")
}

// eachSource calls fn with every Go source file of the module's tree that
// is not a test, testdata or below skip (a folder; "" for none), and its
// text.
func eachSource(t *testing.T, skip string, fn func(path, src string)) {
	t.Helper()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") || path == skip) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		fn(path, string(src))
		return nil
	})
	require.NoError(t, err)
}
