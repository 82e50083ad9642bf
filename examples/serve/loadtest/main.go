// Command loadtest drives the video server with many concurrent clients and checks that no job is
// lost: every accepted job ends completed, or cancelled when the client cancelled it; the server's
// memory after the run is compared with its memory once warm.
//
//	go run ./examples/serve/loadtest -n 200 -queue 16 -clients 32
//
// It starts the server in this process on a loopback port with tiny-h3 (or targets -url, then
// without the memory check). Clients that get 429 wait the Retry-After and submit again; every
// 10th job is cancelled, alternately right after submission (usually while queued) and once it
// runs. It prints a summary and a BENCHMARKS.md row; the exit code is 1 if a job was lost or
// ended otherwise than asked, or memory grew.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"fastvideo/examples/serve/server"
	"fastvideo/fastvideo"
)

func main() { os.Exit(run()) }

type config struct {
	url, model, backend, slowFrom string
	n, queue, clients, each, slow int
}

func run() int {
	var c config
	flag.StringVar(&c.url, "url", "", "server to load (default: start one in this process)")
	flag.StringVar(&c.model, "model", "tiny-h3", "model of the in-process server")
	flag.StringVar(&c.backend, "backend", "go:ops_sequential", "backend of the in-process server")
	flag.IntVar(&c.n, "n", 200, "jobs to submit")
	flag.IntVar(&c.queue, "queue", 16, "queue size of the in-process server")
	flag.IntVar(&c.clients, "clients", 32, "concurrent clients")
	flag.IntVar(&c.each, "cancel-every", 10, "cancel every n-th job (0: none)")
	flag.IntVar(&c.slow, "slow", 0, "instead of jobs: open this many slow-body connections to -url and time a normal client beside them")
	flag.StringVar(&c.slowFrom, "slow-from", "127.0.0.2", "loopback address the slow connections come from")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "loadtest: submit many video jobs concurrently and check that none is lost")
		flag.PrintDefaults()
	}
	flag.Parse()
	if c.slow > 0 {
		if c.url == "" {
			fmt.Fprintln(os.Stderr, "loadtest: -slow needs -url (a serve process, whose connection limits are its own)")
			return 2
		}
		if err := slowAttack(strings.TrimRight(c.url, "/"), c.slowFrom, c.slow); err != nil {
			fmt.Fprintln(os.Stderr, "loadtest:", err)
			return 1
		}
		return 0
	}
	base, mem, stop, err := target(c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		return 1
	}
	defer stop()
	r := load(base, c, mem)
	problems := r.check(base)
	if mem != nil && mem.grew() {
		problems = append(problems, fmt.Sprintf("memory grew: heap %d -> %d MiB", mem.warm.heap>>20, mem.last.heap>>20))
	}
	r.print(c, mem)
	for _, p := range problems {
		fmt.Println("PROBLEM:", p)
	}
	if len(problems) > 0 {
		return 1
	}
	return 0
}

// target returns the base URL to load, a memory sampler (nil for a remote server) and a stop
// function.
func target(c config) (string, *memory, func(), error) {
	if c.url != "" {
		return strings.TrimRight(c.url, "/"), nil, func() {}, nil
	}
	gen, err := fastvideo.New(context.Background(), c.model, fastvideo.WithBackend(c.backend))
	if err != nil {
		return "", nil, nil, err
	}
	dir, err := os.MkdirTemp("", "loadtest-")
	if err != nil {
		return "", nil, nil, err
	}
	srv, err := server.New(server.Config{Generator: gen, DataDir: dir, QueueSize: c.queue})
	if err != nil {
		return "", nil, nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, nil, err
	}
	hs := &http.Server{Handler: srv.Handler()}
	go hs.Serve(ln)
	mem := &memory{}
	stop := func() {
		srv.Shutdown(0)
		hs.Close()
		gen.Close()
		os.RemoveAll(dir)
	}
	return "http://" + ln.Addr().String(), mem, stop, nil
}

// memory samples this process's heap (after a GC) and resident size.
type memory struct{ warm, last sample }

type sample struct{ heap, rss uint64 }

func (m *memory) take() sample {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return sample{heap: ms.HeapInuse, rss: rss()}
}

// rss reads VmRSS from /proc (0 where there is none).
func rss() uint64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb uint64
			fmt.Sscanf(strings.TrimSpace(v), "%d", &kb)
			return kb << 10
		}
	}
	return 0
}

// outcome is one job as the client saw it.
type outcome struct {
	id          string
	cancel      string // "", "queued" or "running": when the client cancelled it
	status      string
	latency     time.Duration // accepted -> finished
	rejections  int           // 429 answers before it was accepted
	submitError error
}

type report struct {
	jobs []outcome
	wall time.Duration
}

// load submits c.n jobs from c.clients goroutines and follows each to its end.
func load(base string, c config, mem *memory) *report {
	r := &report{jobs: make([]outcome, c.n)}
	next := make(chan int)
	var wg sync.WaitGroup
	var warmOnce sync.Once
	var finished sync.WaitGroup
	finished.Add(min(c.n, 2*c.queue))
	begin := time.Now()
	for range c.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := client{base: base}
			for i := range next {
				r.jobs[i] = cl.job(i, c.each)
				if i < 2*c.queue {
					finished.Done()
				}
			}
		}()
	}
	if mem != nil {
		go func() { // warm: once the first jobs are through, every component has been built once
			finished.Wait()
			warmOnce.Do(func() { mem.warm = mem.take() })
		}()
	}
	for i := range c.n {
		next <- i
	}
	close(next)
	wg.Wait()
	r.wall = time.Since(begin)
	if mem != nil {
		warmOnce.Do(func() { mem.warm = mem.take() })
		mem.last = mem.take()
	}
	return r
}

// check verifies every job against the server's own record and the files on disk.
func (r *report) check(base string) []string {
	var problems []string
	cl := client{base: base}
	for i, o := range r.jobs {
		switch {
		case o.submitError != nil:
			problems = append(problems, fmt.Sprintf("job %d: %v", i, o.submitError))
			continue
		case o.status == "completed":
		case o.status == "cancelled" && o.cancel != "":
		default:
			problems = append(problems, fmt.Sprintf("job %d (%s, cancel %q) ended %q", i, o.id, o.cancel, o.status))
		}
		v, err := cl.get(o.id)
		if err != nil || v.Status != o.status {
			problems = append(problems, fmt.Sprintf("job %s: the server says %+v (%v), the client saw %q", o.id, v, err, o.status))
		}
	}
	return problems
}

func (r *report) print(c config, mem *memory) {
	var lat []time.Duration
	counts := map[string]int{}
	rejected := 0
	for _, o := range r.jobs {
		counts[o.status+cancelNote(o)]++
		rejected += o.rejections
		if o.status == "completed" {
			lat = append(lat, o.latency)
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(p*float64(len(lat))))].Seconds()
	}
	thr := float64(len(lat)) / r.wall.Seconds()
	fmt.Printf("%d jobs in %.1f s from %d clients, queue %d: %v; %d answers 429 (retried)\n",
		c.n, r.wall.Seconds(), c.clients, c.queue, counts, rejected)
	fmt.Printf("throughput %.3f videos/s; latency accepted->completed p50 %.2f s, p99 %.2f s\n", thr, pct(0.5), pct(0.99))
	row := fmt.Sprintf("| %d jobs, %d clients, queue %d | %d completed, %d cancelled as asked, 0 lost | %d | %.3f videos/s | %.2f s | %.2f s |",
		c.n, c.clients, c.queue, len(lat), c.n-len(lat), rejected, thr, pct(0.5), pct(0.99))
	if mem != nil {
		fmt.Printf("memory once warm: heap %d MiB, RSS %d MiB; after the run: heap %d MiB, RSS %d MiB\n",
			mem.warm.heap>>20, mem.warm.rss>>20, mem.last.heap>>20, mem.last.rss>>20)
		row += fmt.Sprintf(" %d -> %d MiB heap, %d -> %d MiB RSS |", mem.warm.heap>>20, mem.last.heap>>20, mem.warm.rss>>20, mem.last.rss>>20)
	}
	fmt.Println(row)
}

func cancelNote(o outcome) string {
	if o.cancel == "" {
		return ""
	}
	return " (cancel asked while " + o.cancel + ")"
}

// grew tells whether memory grew past noise between the warm sample and the end.
func (m *memory) grew() bool {
	return m.last.heap > m.warm.heap+m.warm.heap/2+(16<<20)
}
