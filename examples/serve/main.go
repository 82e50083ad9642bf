// Command serve runs an OpenAI-style video generation server for one model: a bounded queue with
// one worker, progress as server-sent events, the job index in SQLite and the videos in a data
// folder, and a page at / to use it from a browser.
//
//	go run ./examples/serve -model tiny-h3 -addr :8080 -data serve-data
//	curl -s localhost:8080/v1/videos -H 'Content-Type: application/json' -d '{"prompt":"a red fox","seconds":"1"}'
//
// Endpoints: POST /v1/videos, GET /v1/videos, GET|DELETE /v1/videos/{id},
// GET /v1/videos/{id}/content (range requests), GET /v1/videos/{id}/events (SSE), GET /v1/models.
// SIGTERM or Ctrl-C stops taking jobs, lets the running one finish within -grace, then exits.
//
// Exit codes: 0 after a clean shutdown, 2 for invalid flags, 1 for any other failure.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"fastvideo/examples/internal/cli"
	"fastvideo/examples/serve/server"
	"fastvideo/fastvideo"
)

const summary = "serve an OpenAI-style video generation API (queue, progress events, SQLite job index) and a browser page"

// envAPIKey is read when -api-key is not given, so the key need not appear in a process list.
const envAPIKey = "FASTVIDEO_API_KEY"

func main() {
	// SIGHUP (the terminal closing) shuts down as cleanly as SIGTERM: the running job gets its grace.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	code := run(ctx, os.Args[1:], os.Getenv(envAPIKey), os.Stderr, nil)
	stop()
	os.Exit(code)
}

// options are the parsed flags.
type options struct {
	model, addr, data, backend, dtype, memory, cache, apiKey string
	allowedHosts                                             []string
	queue, maxPrompt, maxConns, perClient                    int
	maxBody                                                  int64
	timeout, grace, bodyTimeout                              time.Duration
	keepAge                                                  time.Duration
	keepBytes                                                int64
	loraDir                                                  string
	loras                                                    loraNames
	compileCache                                             string
}

// loraNames collects -lora NAME[:STRENGTH] values (names within -lora-dir).
type loraNames []server.LoRA

func (l *loraNames) String() string { return fmt.Sprint(*l) }

func (l *loraNames) Set(v string) error {
	a := cli.ParseLoRA(v)
	*l = append(*l, server.LoRA{Name: a.Path, Strength: a.Strength})
	return nil
}

// parseFlags reads the command line; a nil options with code 0 means -h was asked.
func parseFlags(args []string, envKey string, stderr io.Writer) (*options, int) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "serve: %s\n\nUsage of serve:\n", summary)
		fs.PrintDefaults()
	}
	o := &options{}
	fs.StringVar(&o.model, "model", "tiny-h3", "model: tiny-h3 or tiny-wan (built in, random weights) or a snapshot folder")
	fs.StringVar(&o.addr, "addr", "127.0.0.1:8080", "listen address (\":8080\" listens on every interface)")
	fs.StringVar(&o.data, "data", "serve-data", "data folder: the job index (index.db) and the videos")
	fs.IntVar(&o.queue, "queue", 16, "jobs that may wait behind the running one; more get 429 with Retry-After")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Minute, "longest a generation may run (0: no limit)")
	fs.DurationVar(&o.grace, "grace", 30*time.Second, "on SIGTERM, how long the running job may go on before it is cancelled")
	keep := fs.String("keep", "", `expire finished videos by age and/or total size, e.g. "24h", "10GB", "168h,50GB" (empty: keep all)`)
	fs.StringVar(&o.apiKey, "api-key", envKey, "bearer token required on /v1/ (default $"+envAPIKey+"; empty: no authentication)")
	hosts := fs.String("allowed-hosts", "", "comma-separated host names a server without -api-key answers besides IP addresses and localhost (DNS-rebinding protection), e.g. the machine's LAN name")
	fs.Int64Var(&o.maxBody, "max-body", 64<<10, "largest request body in bytes")
	fs.DurationVar(&o.bodyTimeout, "body-timeout", 10*time.Second, "how long a request body may take to arrive (408 after)")
	fs.IntVar(&o.maxConns, "max-conns", defaultMaxConns, "connections served at once; more wait in the kernel's backlog")
	fs.IntVar(&o.perClient, "max-conns-per-client", defaultPerClient, "connections one client IP address may hold at once; more are closed")
	fs.IntVar(&o.maxPrompt, "max-prompt", 4096, "longest prompt in bytes")
	fs.StringVar(&o.backend, "backend", "", `compute backend: "go" (pure Go, CPU) or "xla:cuda" (default: $GOMLX_BACKEND, else go)`)
	fs.StringVar(&o.dtype, "dtype", "", `compute precision: "f32" or "bf16" (default: f32 on the go backend, bf16 on accelerators)`)
	fs.StringVar(&o.memory, "memory", "", `"auto" (default: each component stays on the device where every other one still runs beside it), "one_resident" or "all_resident"`)
	fs.StringVar(&o.cache, "prompt-cache", "", "folder caching encoded prompts")
	fs.StringVar(&o.compileCache, "compile-cache", "", cli.CompileCacheHelp)
	fs.StringVar(&o.loraDir, "lora-dir", "", "folder of LoRA adapters (.safetensors) that -lora and requests' \"loras\" name by file name; nothing outside it is read")
	fs.Var(&o.loras, "lora", "adapter `NAME[:STRENGTH]` of -lora-dir merged into the model at start (repeatable, in order); a request's \"loras\" must repeat this list or be omitted")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, 0
		}
		return nil, 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "serve: unexpected argument %q\n", fs.Arg(0))
		return nil, 2
	}
	for _, h := range strings.Split(*hosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			o.allowedHosts = append(o.allowedHosts, h)
		}
	}
	if host, _, err := net.SplitHostPort(o.addr); err == nil && host != "" && net.ParseIP(host) == nil {
		o.allowedHosts = append(o.allowedHosts, host) // the name the server was told to listen on
	}
	var err error
	if o.keepAge, o.keepBytes, err = parseKeep(*keep); err != nil {
		fmt.Fprintf(stderr, "serve: -keep: %v\n", err)
		return nil, 2
	}
	if len(o.loras) > 0 && o.loraDir == "" {
		fmt.Fprintln(stderr, "serve: -lora names an adapter of -lora-dir: give the folder too")
		return nil, 2
	}
	var opts fastvideo.Options
	if err := fastvideo.WithCompileCache(o.compileCache)(&opts); err != nil {
		var re *fastvideo.RequestError
		if errors.As(err, &re) {
			err = fmt.Errorf("%s", re.Allowed)
		}
		fmt.Fprintf(stderr, "serve: invalid -compile-cache %q: allowed %v\n", o.compileCache, err)
		return nil, 2
	}
	if err := checkAddr(o.addr); err != nil {
		fmt.Fprintf(stderr, "serve: invalid -addr %q: %v; use HOST:PORT, e.g. 127.0.0.1:8080 or :8080\n", o.addr, err)
		return nil, 2
	}
	if o.queue < 1 || o.maxBody < 1 || o.maxPrompt < 1 || o.maxConns < 1 || o.perClient < 1 || o.bodyTimeout <= 0 || o.timeout < 0 || o.grace < 0 {
		fmt.Fprintln(stderr, "serve: -queue, -max-body, -max-prompt, -max-conns, -max-conns-per-client and -body-timeout must be positive, -timeout and -grace not negative")
		return nil, 2
	}
	return o, -1
}

// checkAddr refuses a listen address whose form is wrong (no port, a port that is no number or
// service name, out of range) before anything starts; whether it can be bound is the runtime's.
func checkAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if port == "" {
		return errors.New("no port")
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("port %q: %w", port, err)
	}
	return nil
}

// parseKeep reads "AGE", "SIZE" or "AGE,SIZE": a Go duration, and bytes with an optional
// KB/MB/GB/TB (powers of 1000) or KiB/MiB/GiB/TiB suffix.
func parseKeep(s string) (age time.Duration, size int64, err error) {
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if d, derr := time.ParseDuration(part); derr == nil && d > 0 {
			age = d
			continue
		}
		n, serr := parseBytes(part)
		if serr != nil {
			return 0, 0, fmt.Errorf("%q is neither an age (e.g. 24h) nor a size (e.g. 10GB)", part)
		}
		size = n
	}
	return age, size, nil
}

var sizePattern = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)$`)

// byteUnits are the size suffixes -keep accepts, lower-cased.
var byteUnits = map[string]float64{"": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}

func parseBytes(s string) (int64, error) {
	m := sizePattern.FindStringSubmatch(s)
	if m == nil {
		return 0, errors.New("not a size")
	}
	scale, ok := byteUnits[strings.ToLower(m[2])]
	n, _ := strconv.ParseFloat(m[1], 64)
	if !ok || n <= 0 {
		return 0, errors.New("not a size")
	}
	return int64(n * scale), nil
}

// run is main without the process: it returns the exit code. ready, when set, receives the
// listening address once the server serves (tests).
func run(ctx context.Context, args []string, envKey string, stderr io.Writer, ready func(addr string)) int {
	o, code := parseFlags(args, envKey, stderr)
	if o == nil {
		return code
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	loras, err := server.LoRAOptions(o.loraDir, o.loras)
	if err != nil {
		fmt.Fprintf(stderr, "serve: invalid -lora: %v\n", err)
		return 2
	}
	gen, err := fastvideo.New(ctx, o.model, append([]fastvideo.Option{fastvideo.WithBackend(o.backend), fastvideo.WithDType(fastvideo.DType(o.dtype)),
		fastvideo.WithMemoryPolicy(fastvideo.MemoryPolicy(o.memory)), fastvideo.WithPromptCache(o.cache),
		fastvideo.WithCompileCache(o.compileCache)}, loras...)...)
	if err != nil {
		fmt.Fprintf(stderr, "serve: %v\n", err)
		var re *fastvideo.RequestError
		if errors.As(err, &re) {
			return 2 // a flag named a model, backend, precision, policy or cache folder that does not exist or cannot serve
		}
		return 1
	}
	defer gen.Close()
	srv, err := server.New(server.Config{Generator: gen, DataDir: o.data, QueueSize: o.queue, JobTimeout: o.timeout,
		KeepAge: o.keepAge, KeepBytes: o.keepBytes, APIKey: o.apiKey, AllowedHosts: o.allowedHosts, MaxBodyBytes: o.maxBody, BodyTimeout: o.bodyTimeout,
		MaxPromptBytes: o.maxPrompt, Logger: log, LoRADir: o.loraDir, LoRA: o.loras})
	if err != nil {
		fmt.Fprintf(stderr, "serve: %v\n", err)
		return 1
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		fmt.Fprintf(stderr, "serve: %v\n", err)
		srv.Shutdown(0)
		return 1
	}
	return serve(ctx, newLimitListener(ln, o.maxConns, o.perClient), srv, o, log, ready)
}

// serve answers requests until ctx ends, then shuts down in order: no new jobs, the running one
// finishes or is cancelled after the grace period, the event streams end, the connections close.
func serve(ctx context.Context, ln net.Listener, srv *server.Server, o *options, log *slog.Logger, ready func(string)) int {
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	failed := make(chan error, 1)
	go func() { failed <- hs.Serve(ln) }()
	log.Info("serving", "addr", "http://"+ln.Addr().String(), "model", o.model, "data", o.data, "queue", o.queue,
		"auth", o.apiKey != "")
	if ready != nil {
		ready(ln.Addr().String())
	}
	code := 0
	select {
	case <-ctx.Done():
		log.Info("shutting down", "grace", o.grace)
	case err := <-failed:
		log.Error("serving", "err", err)
		code = 1
	}
	if err := srv.Shutdown(o.grace); err != nil {
		log.Error("closing the job index", "err", err)
		code = 1
	}
	closeCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := hs.Shutdown(closeCtx); err != nil {
		hs.Close()
	}
	return code
}
