package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"fastvideo/fastvideo"
)

// heartbeat keeps idle event streams open through proxies that close silent connections.
const heartbeat = 15 * time.Second

// previewEvent is the data of a "preview" event: a denoising step's x0 estimate as an image
// (fastvideo.Preview), the bytes base64-encoded.
type previewEvent struct {
	ID     string `json:"id"`
	Step   int    `json:"step"`
	MIME   string `json:"mime"`
	Width  int    `json:"width"`
	Height int    `json:"height"`
	Frames []int  `json:"frames"`
	Data   []byte `json:"data"`
}

// handleEvents streams a job's state as server-sent events: one "video.<status>" event with the
// job object now and at every change (progress, stage, status; a burst of changes comes as its
// latest state), ending after the event of a finished status. A job that asked for previews also
// gets a "preview" event with the latest step preview whenever a new one exists.
func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request, id string) {
	v, preview, changed, err := s.watch(id)
	if !s.found(w, id, err) {
		return
	}
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx: do not hold the stream back
	w.WriteHeader(http.StatusOK)
	tick := time.NewTicker(heartbeat)
	defer tick.Stop()
	var sent *fastvideo.Preview
	for {
		if preview != nil && preview != sent {
			sent = preview
			data, err := json.Marshal(previewEvent{ID: id, Step: preview.Step, MIME: preview.MIME, Width: preview.Width,
				Height: preview.Height, Frames: preview.Frames, Data: preview.Data})
			if err != nil {
				return
			}
			if _, err := fmt.Fprintf(w, "event: preview\ndata: %s\n\n", data); err != nil {
				return
			}
		}
		data, err := json.Marshal(v)
		if err != nil {
			return
		}
		if _, err := fmt.Fprintf(w, "event: video.%s\ndata: %s\n\n", v.Status, data); err != nil {
			return
		}
		if rc.Flush() != nil || v.finished() || s.isStopping() {
			return
		}
		if !s.waitChange(w, rc, changed, r, tick) {
			return
		}
		if v, preview, changed, err = s.watch(id); err != nil {
			return // deleted meanwhile
		}
	}
}

// waitChange waits for the job to change, writing heartbeats meanwhile; false means the client
// left. When the server stops, the stream sends the job's last state and ends.
func (s *Server) waitChange(w http.ResponseWriter, rc *http.ResponseController, changed <-chan struct{}, r *http.Request, tick *time.Ticker) bool {
	for {
		select {
		case <-changed:
			return true
		case <-r.Context().Done():
			return false
		case <-s.stopping:
			return true
		case <-tick.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil || rc.Flush() != nil {
				return false
			}
		}
	}
}

// watch returns a job's state, its latest preview (nil: none, or finished) and a channel closed at
// its next change (nil once finished).
func (s *Server) watch(id string) (*Video, *fastvideo.Preview, <-chan struct{}, error) {
	s.mu.Lock()
	if j := s.active[id]; j != nil {
		v, p, changed := s.liveLocked(j), j.preview, j.changed
		s.mu.Unlock()
		return v, p, changed, nil
	}
	s.mu.Unlock()
	v, _, err := s.st.get(id)
	return v, nil, nil, err
}

func (s *Server) isStopping() bool {
	select {
	case <-s.stopping:
		return true
	default:
		return false
	}
}
