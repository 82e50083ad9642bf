// Package server is an OpenAI-style video generation service around one fastvideo.VideoGenerator:
// a bounded FIFO queue with one worker, progress as server-sent events, the job index in SQLite
// and the outputs as files in a data folder, and a page at / to use it from a browser.
package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"fastvideo/fastvideo"
)

// Config configures a Server. Zero values take the defaults noted.
type Config struct {
	// Generator runs the jobs; the Server does not close it.
	Generator *fastvideo.VideoGenerator
	// DataDir holds index.db (the job index) and videos/ (the outputs).
	DataDir string
	// QueueSize bounds the jobs waiting behind the running one (default 16); beyond it POST
	// /v1/videos answers 429 with Retry-After.
	QueueSize int
	// JobTimeout bounds one generation's running time (0: none).
	JobTimeout time.Duration
	// KeepAge and KeepBytes expire finished jobs: older than KeepAge, and the oldest outputs past
	// KeepBytes in all (0: no limit).
	KeepAge   time.Duration
	KeepBytes int64
	// APIKey, when set, is the bearer token every /v1/ request must carry. Without one the server
	// answers only Hosts that are IP addresses, localhost or AllowedHosts, and refuses
	// state-changing requests from other origins (what a browser page elsewhere could send).
	APIKey string
	// AllowedHosts are the host names (no port) a keyless server answers besides IP addresses and
	// localhost, e.g. the machine's name on the LAN.
	AllowedHosts []string
	// BodyTimeout bounds how long a create request's body may take to arrive (default 10 s; 408 after).
	BodyTimeout time.Duration
	// MaxBodyBytes bounds a request body (default 64 KiB); MaxPromptBytes a prompt (default 4096).
	MaxBodyBytes   int64
	MaxPromptBytes int
	// Logger receives one line per job event (default: discard).
	Logger *slog.Logger
	// LoRADir is the folder whose adapter files requests may name ("": no adapters); LoRA the adapters
	// the Generator was opened with (LoRAOptions), which a request's "loras" must repeat when it sends one.
	LoRADir string
	LoRA    []LoRA
}

// leaseTTL is how long a job's owner vouches for it without renewing; the janitor renews every
// third of it.
const leaseTTL = 30 * time.Second

// Server serves the videos API. Create it with New, serve Handler, end with Shutdown.
type Server struct {
	cfg       Config
	gen       *fastvideo.VideoGenerator
	info      fastvideo.ModelInfo
	st        *store
	videosDir string
	keep      keepPolicy
	limits    limits
	log       *slog.Logger
	handler   http.Handler
	unlock    func() error // releases the data folder (lockDataDir)
	started   time.Time

	mu        sync.Mutex
	active    map[string]*job // queued and running jobs
	pending   []*job          // FIFO, the next job first
	running   *job
	accepting bool
	meanRun   time.Duration // moving average of generation times, for Retry-After
	wake      chan struct{}

	stopping   chan struct{} // closed when Shutdown begins: event streams end
	stopped    chan struct{} // closed when the worker and the janitor must end
	workerDone chan struct{}
	janitor    sync.WaitGroup
	shutdown   sync.Once

	// progressHook, when set (tests), sees every progress event of a running job, on the
	// generating goroutine, with the job's context.
	progressHook func(ctx context.Context, e fastvideo.Event)
}

// keepPolicy is when finished jobs expire.
type keepPolicy struct {
	maxAge   time.Duration
	maxBytes int64
}

// New opens the data folder and its index, settles the jobs a previous process left unfinished,
// and starts the worker.
func New(cfg Config) (*Server, error) {
	if cfg.Generator == nil {
		return nil, errors.New("server: no generator")
	}
	cfg = withDefaults(cfg)
	// Paths are compared with the SDK's absolute output paths: a relative data folder (the default
	// -data is) would make every finished video "written under another name".
	abs, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("server: the data folder %q: %w", cfg.DataDir, err)
	}
	cfg.DataDir = abs
	s := &Server{
		cfg: cfg, gen: cfg.Generator, info: cfg.Generator.Model(), videosDir: filepath.Join(cfg.DataDir, "videos"),
		keep: keepPolicy{cfg.KeepAge, cfg.KeepBytes}, limits: limits{maxPromptBytes: cfg.MaxPromptBytes},
		log: cfg.Logger, started: time.Now(), active: map[string]*job{}, accepting: true, wake: make(chan struct{}, 1),
		stopping: make(chan struct{}), stopped: make(chan struct{}), workerDone: make(chan struct{}),
	}
	if err := os.MkdirAll(s.videosDir, 0o755); err != nil {
		return nil, fmt.Errorf("server: creating the data folder: %w", err)
	}
	if s.unlock, err = lockDataDir(cfg.DataDir); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	st, err := openStore(cfg.DataDir, newOwner())
	if err != nil {
		s.unlock()
		return nil, fmt.Errorf("server: %w", err)
	}
	s.st = st
	if err := s.recover(); err != nil {
		st.close()
		s.unlock()
		return nil, fmt.Errorf("server: %w", err)
	}
	s.handler = s.routes()
	go s.work()
	s.janitor.Add(1)
	go s.tend()
	return s, nil
}

// redact takes this machine's paths out of a message a client will read: the data folder becomes
// "<data>", the home folder "~".
func (s *Server) redact(msg string) string {
	msg = strings.ReplaceAll(msg, s.cfg.DataDir, "<data>")
	if home, err := os.UserHomeDir(); err == nil && len(home) > 1 {
		msg = strings.ReplaceAll(msg, home, "~")
	}
	return msg
}

func withDefaults(cfg Config) Config {
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = 16
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 64 << 10
	}
	if cfg.MaxPromptBytes <= 0 {
		cfg.MaxPromptBytes = 4096
	}
	if cfg.BodyTimeout <= 0 {
		cfg.BodyTimeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return cfg
}

// newOwner names this process in the job index: host, pid and start time, so a restarted server
// on the same host can tell its predecessor's jobs from a live neighbour's.
func newOwner() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%d/%d", host, os.Getpid(), time.Now().UnixNano())
}

// recover settles what a previous process left: its unfinished jobs are marked failed, its
// half-written and unindexed files removed, and expired jobs deleted.
func (s *Server) recover() error {
	n, err := s.st.failAbandoned(time.Now(), ownerIsDead)
	if err != nil {
		return fmt.Errorf("settling unfinished jobs: %w", err)
	}
	if n > 0 {
		s.log.Info("marked jobs of a stopped server failed", "jobs", n)
	}
	if err := s.removeOrphans(false); err != nil {
		return err
	}
	return s.expire()
}

// removeOrphans deletes files in the videos folder that no job owns: staging files (hidden names)
// of a process that died mid-write and, unless stagingOnly, outputs whose job was deleted. A
// staging file is stale once unchanged for longer than a job may run (a day without -timeout):
// until then a job of this or another process sharing the folder may still be writing it. An
// output younger than a lease may be about to be recorded by its process.
func (s *Server) removeOrphans(stagingOnly bool) error {
	stagingStale := 24 * time.Hour
	if s.cfg.JobTimeout > 0 {
		stagingStale = max(s.cfg.JobTimeout, leaseTTL)
	}
	entries, err := os.ReadDir(s.videosDir)
	if err != nil {
		return fmt.Errorf("reading %s: %w", s.videosDir, err)
	}
	for _, e := range entries {
		info, err := e.Info()
		staging := strings.HasPrefix(e.Name(), ".")
		if err != nil || !info.Mode().IsRegular() || (stagingOnly && !staging) {
			continue
		}
		if age := time.Since(info.ModTime()); age < leaseTTL || (staging && age < stagingStale) {
			continue
		}
		owned, err := s.st.hasFile(e.Name())
		if err != nil {
			return err
		}
		if !owned && !staging {
			// A finished video is never lost: its job's index write may have failed after the rename.
			if owned, err = s.st.adopt(strings.TrimSuffix(e.Name(), ".mp4"), e.Name(), info.Size(), time.Now()); err != nil {
				return err
			}
			if owned {
				s.log.Info("adopted a finished video whose job lost its index write", "file", e.Name())
			}
		}
		if !owned {
			s.log.Info("removing an orphaned file", "file", e.Name())
			os.Remove(filepath.Join(s.videosDir, e.Name()))
		}
	}
	return nil
}

// tend renews this process's leases, settles jobs abandoned by other processes, expires old ones
// and removes stale staging files until the server stops.
func (s *Server) tend() {
	defer s.janitor.Done()
	tick := time.NewTicker(leaseTTL / 3)
	defer tick.Stop()
	for {
		select {
		case <-s.stopped:
			return
		case <-tick.C:
		}
		now := time.Now()
		if err := s.st.renewLeases(now.Add(leaseTTL)); err != nil {
			s.log.Error("renewing job leases", "err", err)
		}
		if _, err := s.st.failAbandoned(now, ownerIsDead); err != nil {
			s.log.Error("settling abandoned jobs", "err", err)
		}
		if err := s.expire(); err != nil {
			s.log.Error("expiring jobs", "err", err)
		}
		if err := s.removeOrphans(true); err != nil {
			s.log.Error("removing staging files", "err", err)
		}
	}
}

// expire deletes the finished jobs the keep policy no longer keeps, with their files.
func (s *Server) expire() error {
	if s.keep == (keepPolicy{}) {
		return nil
	}
	ids, err := s.st.expired(context.Background(), s.keep, time.Now())
	if err != nil {
		return err
	}
	for _, id := range ids {
		if err := s.deleteFinished(id); err != nil && !errors.Is(err, errNotFound) {
			return err
		}
	}
	return nil
}

// deleteFinished removes a finished job's row, then its file: a crash between the two leaves a
// file no job owns, which the next start removes.
func (s *Server) deleteFinished(id string) error {
	file, err := s.st.remove(id)
	if err != nil {
		return err
	}
	if file != "" {
		if err := os.Remove(filepath.Join(s.videosDir, filepath.Base(file))); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// Handler is the HTTP API and the page.
func (s *Server) Handler() http.Handler { return s.handler }

// Shutdown stops taking jobs (POST answers 503), fails the queued ones, lets the running one
// finish within grace and then cancels it (the SDK removes its partial file), ends the event
// streams and closes the index. Call it before http.Server.Shutdown, which waits for the streams.
func (s *Server) Shutdown(grace time.Duration) error {
	var err error
	s.shutdown.Do(func() {
		s.mu.Lock()
		s.accepting = false
		queued := s.pending
		s.pending = nil
		running := s.running
		s.mu.Unlock()
		for _, j := range queued {
			s.mu.Lock()
			final, settled := s.settleQueuedLocked(j, func(v *Video, now time.Time) {
				v.fail(now, &APIError{Code: "server_shutdown", Message: "the server shut down before the job started; submit it again"})
			})
			s.mu.Unlock()
			if settled {
				s.retire(j, final, "", 0)
			}
		}
		if running != nil {
			select {
			case <-running.done:
			case <-time.After(grace):
				s.log.Info("grace period over: cancelling the running job", "id", running.id)
				running.cancel(errShutdown)
				<-running.done
			}
		}
		close(s.stopping)
		close(s.stopped)
		<-s.workerDone
		s.janitor.Wait()
		err = errors.Join(s.st.close(), s.unlock())
	})
	return err
}
