package server

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"time"

	"fastvideo/fastvideo"
)

// job is a queued or running job. Its fields are guarded by Server.mu.
type job struct {
	id  string
	v   Video
	req fastvideo.Request
	// changed is closed (and replaced) at every change of v: event streams wait on it.
	changed chan struct{}
	// cancel stops the running generation with a cause; nil while queued.
	cancel context.CancelCauseFunc
	// retiring is set once the job's end is decided (it is being written to the index).
	retiring bool
	// done is closed once the job is finished and written to the index.
	done chan struct{}
	// preview is the latest step preview (Request.Preview), sent as a "preview" event.
	preview *fastvideo.Preview
}

// notifyLocked wakes the job's event streams.
func (j *job) notifyLocked() {
	close(j.changed)
	j.changed = make(chan struct{})
}

// errQueueFull: the queue holds QueueSize jobs already.
var errQueueFull = errors.New("the queue is full")

// errNotAccepting: the server is shutting down.
var errNotAccepting = errors.New("the server is shutting down")

// enqueue records a new job and puts it at the end of the queue.
func (s *Server) enqueue(v *Video, req fastvideo.Request) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.accepting {
		return errNotAccepting
	}
	if len(s.pending) >= s.cfg.QueueSize {
		return errQueueFull
	}
	if err := s.st.insert(v, req, time.Now().Add(leaseTTL)); err != nil {
		return err
	}
	j := &job{id: v.ID, v: *v, req: req, changed: make(chan struct{}), done: make(chan struct{})}
	s.active[v.ID] = j
	s.pending = append(s.pending, j)
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return nil
}

// retryAfter estimates when a place in the queue frees up: one mean generation (at least 1 s).
func (s *Server) retryAfter() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return max(1, int(math.Ceil(s.meanRun.Seconds())))
}

// work runs the queue's jobs one at a time, first in first out, until the server stops.
func (s *Server) work() {
	defer close(s.workerDone)
	for {
		j, ctx := s.next()
		if j == nil {
			return
		}
		s.run(ctx, j)
	}
}

// next takes the first queued job and marks it running, or returns nil once the server stops.
func (s *Server) next() (*job, context.Context) {
	for {
		s.mu.Lock()
		if len(s.pending) > 0 {
			j := s.pending[0]
			s.pending[0] = nil
			s.pending = s.pending[1:]
			s.queueMovedLocked()
			ctx, cancel := context.WithCancelCause(context.Background())
			j.cancel, s.running = cancel, j
			j.v.Status, j.v.StartedAt = statusInProgress, fastvideo.Ptr(time.Now().Unix())
			j.notifyLocked()
			v := j.v
			s.mu.Unlock()
			s.persist(&v, "", 0)
			return j, ctx
		}
		s.mu.Unlock()
		select {
		case <-s.wake:
		case <-s.stopped:
			return nil, nil
		}
	}
}

// run generates one job into its own file in the videos folder and records the outcome.
func (s *Server) run(ctx context.Context, j *job) {
	if s.cfg.JobTimeout > 0 {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeoutCause(ctx, s.cfg.JobTimeout, errJobTimeout)
		defer stop()
	}
	req := j.req
	req.OutputPath = filepath.Join(s.videosDir, outputName(j.id))
	req.Progress = func(e fastvideo.Event) { s.progress(ctx, j, e) }
	s.log.Info("job started", "id", j.id)
	start := time.Now()
	res, err := s.gen.Generate(ctx, req)
	elapsed := time.Since(start)
	cause := context.Cause(ctx)
	j.cancel(nil)
	s.finish(j, res, err, cause, elapsed)
}

// progress maps the pipeline's events onto 0-100: the stages before denoising take the first
// 5 %, the denoising steps up to 85 %, decoding up to 97 %, muxing the rest.
func (s *Server) progress(ctx context.Context, j *job, e fastvideo.Event) {
	p := -1
	s.mu.Lock()
	switch e.Kind {
	case fastvideo.StageStart:
		j.v.Stage = string(e.Stage)
		p = map[fastvideo.Stage]int{fastvideo.StageCondition: 1, fastvideo.StageDenoise: 5,
			fastvideo.StageDecode: 85, fastvideo.StageMux: 97}[e.Stage]
	case fastvideo.DenoiseStep:
		if e.Steps > 0 {
			p = 5 + 80*e.Step/e.Steps
		}
	case fastvideo.DecodeProgress:
		if e.Total > 0 {
			p = 85 + 12*e.Done/e.Total
		}
	case fastvideo.Warning:
		s.log.Warn("generation warning", "id", j.id, "warning", e.Message)
	}
	if e.Preview != nil {
		j.preview = e.Preview
	}
	j.v.Progress = max(j.v.Progress, min(p, 99))
	j.notifyLocked()
	s.mu.Unlock()
	if s.progressHook != nil {
		s.progressHook(ctx, e)
	}
}

// finish records a generation's outcome: in the index first, then for the API's readers.
func (s *Server) finish(j *job, res *fastvideo.Result, err, cause error, elapsed time.Duration) {
	now := time.Now()
	s.mu.Lock()
	final := j.v
	s.meanRun = (3*s.meanRun + elapsed) / 4
	s.mu.Unlock()
	v := &final
	v.Stage, v.CompletedAt = "", fastvideo.Ptr(now.Unix())
	var file string
	var size int64
	switch {
	case err == nil:
		file, size, err = s.completed(v, res)
		if err != nil {
			v.fail(now, &APIError{Code: "generation_failed", Message: err.Error(), Type: "server_error"})
		}
	case errors.Is(cause, errCancelledByUser):
		v.Status = statusCancelled
	default:
		v.fail(now, errorOf(err, cause))
	}
	if e := v.Error; e != nil {
		s.log.Info("job failed", "id", j.id, "err", e.Message) // whole here; the client sees no host paths
		e.Message = s.redact(e.Message)
	}
	s.log.Info("job finished", "id", j.id, "status", final.Status, "seconds", elapsed.Seconds())
	s.retire(j, final, file, size)
}

// completed fills in a finished generation's results and returns its file and size. The file
// must be the one the job asked for: a name the SDK made to avoid an existing file would be one
// no job owns.
func (s *Server) completed(v *Video, res *fastvideo.Result) (string, int64, error) {
	want := filepath.Join(s.videosDir, outputName(v.ID))
	st, err := os.Stat(res.OutputPath)
	if err != nil {
		return "", 0, err
	}
	if filepath.Clean(res.OutputPath) != want {
		os.Remove(res.OutputPath)
		return "", 0, errors.New("the output was written under another name than the job's")
	}
	timings, err := res.Timings.MarshalJSON()
	if err != nil {
		return "", 0, err
	}
	v.Status, v.Progress, v.Timings, v.Seed = statusCompleted, 100, timings, res.Seed
	if res.PromptEnhancement != nil {
		v.PromptUsed = res.Prompt
	}
	v.Width, v.Height, v.NumFrames, v.FPS = res.Width, res.Height, res.NumFrames, res.FPS
	v.Seconds = formatSeconds(res.NumFrames, res.FPS)
	return filepath.Base(want), st.Size(), nil
}

// persist writes a job to the index; a failure is logged (the job goes on in memory).
func (s *Server) persist(v *Video, file string, size int64) {
	if err := s.st.update(v, file, size); err != nil {
		s.log.Error("writing the job index", "id", v.ID, "err", err)
	}
}

// cancel cancels a queued or running job and reports whether it was one. A queued job is
// cancelled at once; a running one stops at its next step and cancel waits for that (up to
// wait), so that when it returns the job's partial file is gone.
func (s *Server) cancel(id string, wait time.Duration) bool {
	s.mu.Lock()
	j := s.active[id]
	if j == nil {
		s.mu.Unlock()
		return false
	}
	if j.cancel != nil {
		j.cancel(errCancelledByUser)
		s.mu.Unlock()
		select {
		case <-j.done:
		case <-time.After(wait):
		}
		return true
	}
	final, settled := s.settleQueuedLocked(j, func(v *Video, now time.Time) {
		v.Status, v.CompletedAt = statusCancelled, fastvideo.Ptr(now.Unix())
	})
	s.mu.Unlock()
	if settled {
		s.retire(j, final, "", 0)
	}
	return true
}

// queueMovedLocked tells the waiting jobs' event streams that their places changed.
func (s *Server) queueMovedLocked() {
	for _, j := range s.pending {
		j.notifyLocked()
	}
}

// settleQueuedLocked ends a job that never ran (cancelled, or failed at shutdown): it leaves the
// queue and settle says how it ended. It reports false if the job started or ended meanwhile.
func (s *Server) settleQueuedLocked(j *job, settle func(v *Video, now time.Time)) (Video, bool) {
	if j.cancel != nil || j.retiring {
		return Video{}, false
	}
	j.retiring = true
	for i, x := range s.pending {
		if x == j {
			s.pending = append(s.pending[:i], s.pending[i+1:]...)
			s.queueMovedLocked()
			break
		}
	}
	final := j.v
	settle(&final, time.Now())
	return final, true
}

// retire writes a finished job to the index, then takes it out of the active jobs and wakes its
// event streams. Readers see the job live until it is in the index, and finished only from there,
// where its file is recorded too.
func (s *Server) retire(j *job, final Video, file string, size int64) {
	if s.keep.maxAge > 0 {
		final.ExpiresAt = fastvideo.Ptr(time.Now().Add(s.keep.maxAge).Unix())
	}
	s.persist(&final, file, size)
	s.mu.Lock()
	j.v = final
	delete(s.active, j.id)
	if s.running == j {
		s.running = nil
	}
	j.notifyLocked()
	close(j.done)
	s.mu.Unlock()
}
