package server

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"fastvideo/fastvideo"
)

// routes are the API (OpenAI's videos endpoints, the events stream, the models) and the page.
func (s *Server) routes() http.Handler {
	api := http.NewServeMux()
	api.HandleFunc("GET /v1/models", s.handleModels)
	api.HandleFunc("POST /v1/videos", s.handleCreate)
	api.HandleFunc("GET /v1/videos", s.handleList)
	api.HandleFunc("GET /v1/videos/{id}", s.withJobID(s.handleGet))
	api.HandleFunc("DELETE /v1/videos/{id}", s.withJobID(s.handleDelete))
	api.HandleFunc("GET /v1/videos/{id}/content", s.withJobID(s.handleContent))
	api.HandleFunc("GET /v1/videos/{id}/events", s.withJobID(s.handleEvents))
	api.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, &APIError{Code: "not_found", Message: r.Method + " " + r.URL.Path + " is not an endpoint"})
	})
	mux := http.NewServeMux()
	mux.Handle("/v1/", s.authorized(api))
	mux.HandleFunc("GET /{$}", servePage)
	return s.guarded(mux)
}

// authorized requires the bearer token when one is configured.
func (s *Server) authorized(next http.Handler) http.Handler {
	if s.cfg.APIKey == "" {
		return next
	}
	want := []byte("Bearer " + s.cfg.APIKey)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="fastvideo"`)
			writeError(w, http.StatusUnauthorized, &APIError{Code: "invalid_api_key", Type: "invalid_request_error",
				Message: "a valid API key is required: Authorization: Bearer <key>"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// withJobID rejects ids the server could not have made before anything looks them up.
func (s *Server) withJobID(h func(http.ResponseWriter, *http.Request, string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		if !idPattern.MatchString(id) {
			writeError(w, http.StatusNotFound, notFound(id))
			return
		}
		h(w, r, id)
	}
}

func notFound(id string) *APIError {
	return &APIError{Code: "video_not_found", Type: "invalid_request_error", Param: "id",
		Message: fmt.Sprintf("no video %q", id)}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, e *APIError) {
	if e.Type == "" && status < 500 {
		e.Type = "invalid_request_error"
	}
	writeJSON(w, status, map[string]*APIError{"error": e})
}

// model is one entry of GET /v1/models: OpenAI's model object plus what a client needs to fill a
// request (the presets' sizes, frame counts, steps and rates).
type model struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	fastvideo.ModelInfo
	// LoRAs are the adapters merged into the model at start: what a request's "loras" may repeat.
	LoRAs []LoRA `json:"loras"`
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	m := model{ID: s.info.Name, Object: "model", Created: s.started.Unix(), OwnedBy: "fastvideo", ModelInfo: s.info,
		LoRAs: append([]LoRA{}, s.cfg.LoRA...)}
	// The server generates from text only (input_reference is refused), whatever the model takes.
	m.FirstImage, m.LastImage = false, false
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []model{m}})
}

func (s *Server) handleCreate(w http.ResponseWriter, r *http.Request) {
	// The body must arrive within BodyTimeout: a client trickling it would hold its connection (and
	// the server's memory for it) as long as it likes. Set here only, for this request (the server
	// sets the next request's deadlines itself): a read deadline for every request would also end the
	// event streams. It also bounds the server's read of an unread rest after an early answer.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.cfg.BodyTimeout))
	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
	v, req, err := s.admit(r)
	if err == nil {
		err = s.enqueue(v, req)
	}
	var bad *badRequest
	switch {
	case err == nil:
		s.log.Info("job queued", "id", v.ID, "frames", v.NumFrames, "size", v.Size)
		writeJSON(w, http.StatusOK, s.snapshot(v.ID))
	case errors.As(err, &bad):
		writeError(w, bad.status, &APIError{Code: "invalid_request", Param: bad.param, Message: bad.msg})
	case errors.Is(err, errQueueFull):
		w.Header().Set("Retry-After", strconv.Itoa(s.retryAfter()))
		writeError(w, http.StatusTooManyRequests, &APIError{Code: "queue_full", Type: "rate_limit_error",
			Message: fmt.Sprintf("%d videos are waiting already; retry later", s.cfg.QueueSize)})
	case errors.Is(err, errNotAccepting):
		w.Header().Set("Retry-After", "30")
		writeError(w, http.StatusServiceUnavailable, &APIError{Code: "server_shutting_down", Message: err.Error()})
	default:
		s.log.Error("creating a job", "err", err)
		writeError(w, http.StatusInternalServerError, &APIError{Code: "internal_error", Message: s.redact(err.Error()), Type: "server_error"})
	}
}

// admit parses and validates a create request: a *badRequest names the field at fault. Nothing
// is loaded: the SDK validates against the model's specification alone.
func (s *Server) admit(r *http.Request) (*Video, fastvideo.Request, error) {
	p, err := parseCreate(r)
	if err != nil {
		return nil, fastvideo.Request{}, err
	}
	req, err := p.request(s.info, s.limits)
	if err != nil {
		return nil, req, err
	}
	if p.loras != nil {
		if err := s.checkLoRAs(p.loras); err != nil {
			return nil, req, err
		}
	}
	// Plan applies the SDK's request rules without loading anything heavy (the prompt's presence is
	// checked above, the output path is the server's), its length measured with the model's tokenizer.
	plan, err := s.gen.Plan(req)
	var re *fastvideo.RequestError
	if errors.As(err, &re) {
		if sent := p.clientParam(re.Field); sent != re.Field {
			return nil, req, invalid(sent, "%s gives %s", sent, re.Error())
		}
		return nil, req, invalid(re.Field, "%s", re.Error())
	}
	if err != nil {
		return nil, req, err
	}
	id, err := newVideoID()
	if err != nil {
		return nil, req, err
	}
	return newVideo(id, s.info.Name, req, plan, time.Now()), req, nil
}

// snapshot is a job's current state: live while queued or running, else from the index.
func (s *Server) snapshot(id string) *Video {
	v, _, _ := s.lookup(id)
	return v
}

// lookup returns a job and, once completed, its output file name.
func (s *Server) lookup(id string) (*Video, string, error) {
	if v := s.live(id); v != nil {
		return v, "", nil
	}
	return s.st.get(id)
}

func indexOf(list []*job, j *job) int {
	for i, x := range list {
		if x == j {
			return i
		}
	}
	return -1
}

func (s *Server) handleGet(w http.ResponseWriter, r *http.Request, id string) {
	v, _, err := s.lookup(id)
	if !s.found(w, id, err) {
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// found writes the error response of a failed lookup and reports whether there was none.
func (s *Server) found(w http.ResponseWriter, id string, err error) bool {
	switch {
	case err == nil:
		return true
	case errors.Is(err, errNotFound):
		writeError(w, http.StatusNotFound, notFound(id))
	default:
		s.log.Error("reading the job index", "id", id, "err", err)
		writeError(w, http.StatusInternalServerError, &APIError{Code: "internal_error", Message: s.redact(err.Error()), Type: "server_error"})
	}
	return false
}

// cancelWait bounds how long DELETE waits for a running job to stop.
const cancelWait = 30 * time.Second

// handleDelete cancels a queued or running job (answering its final object), or deletes a
// finished one and its file (answering OpenAI's deletion object).
func (s *Server) handleDelete(w http.ResponseWriter, r *http.Request, id string) {
	if s.cancel(id, cancelWait) {
		writeJSON(w, http.StatusOK, s.snapshot(id))
		return
	}
	err := s.deleteFinished(id)
	if !s.found(w, id, err) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "object": "video.deleted", "deleted": true})
}

// handleContent serves a completed job's MP4, with range requests (browsers seek with them).
func (s *Server) handleContent(w http.ResponseWriter, r *http.Request, id string) {
	if variant := r.URL.Query().Get("variant"); variant != "" && variant != "video" {
		writeError(w, http.StatusBadRequest, &APIError{Code: "invalid_request", Param: "variant",
			Message: fmt.Sprintf("variant %q is not available: only \"video\"", variant)})
		return
	}
	v, file, err := s.lookup(id)
	if !s.found(w, id, err) {
		return
	}
	if v.Status != statusCompleted || file == "" {
		writeError(w, http.StatusConflict, &APIError{Code: "video_not_ready", Param: "id",
			Message: fmt.Sprintf("video %s is %s, not completed", id, v.Status)})
		return
	}
	f, err := os.Open(filepath.Join(s.videosDir, filepath.Base(file)))
	if err != nil {
		s.log.Error("opening an output", "id", id, "err", err)
		writeError(w, http.StatusGone, &APIError{Code: "video_missing", Message: "the video's file is gone from the data folder"})
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		writeError(w, http.StatusInternalServerError, &APIError{Code: "internal_error", Message: s.redact(err.Error()), Type: "server_error"})
		return
	}
	w.Header().Set("Content-Type", "video/mp4")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`inline; filename="%s.mp4"`, id))
	http.ServeContent(w, r, "", st.ModTime(), f)
}

// handleList is OpenAI's list: newest first (order=asc for oldest), limit (1-100, default 20),
// after (a job id) for the next page.
func (s *Server) handleList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := 20
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 100 {
			writeError(w, http.StatusBadRequest, &APIError{Code: "invalid_request", Param: "limit", Message: "limit must be 1-100"})
			return
		}
		limit = n
	}
	order := strings.ToLower(q.Get("order"))
	if order != "" && order != "asc" && order != "desc" {
		writeError(w, http.StatusBadRequest, &APIError{Code: "invalid_request", Param: "order", Message: `order must be "asc" or "desc"`})
		return
	}
	after := q.Get("after")
	if after != "" && !idPattern.MatchString(after) {
		writeError(w, http.StatusBadRequest, &APIError{Code: "invalid_request", Param: "after", Message: "after must be a video id"})
		return
	}
	list, more, err := s.st.list(limit, after, order == "asc")
	if err != nil {
		s.found(w, "", err)
		return
	}
	for i, v := range list {
		if live := s.live(v.ID); live != nil {
			list[i] = live
		}
	}
	if list == nil {
		list = []*Video{} // an empty list, not null
	}
	out := map[string]any{"object": "list", "data": list, "has_more": more}
	if len(list) > 0 {
		out["first_id"], out["last_id"] = list[0].ID, list[len(list)-1].ID
	}
	writeJSON(w, http.StatusOK, out)
}

// live is the in-memory state of a queued or running job, nil for others.
func (s *Server) live(id string) *Video {
	s.mu.Lock()
	defer s.mu.Unlock()
	if j := s.active[id]; j != nil {
		return s.liveLocked(j)
	}
	return nil
}

// liveLocked is a copy of an active job's state with its place in the queue.
func (s *Server) liveLocked(j *job) *Video {
	v := j.v
	if i := indexOf(s.pending, j); i >= 0 {
		v.QueuePosition = fastvideo.Ptr(i + 1)
	}
	return &v
}
