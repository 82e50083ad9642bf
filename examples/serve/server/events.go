package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// heartbeat keeps idle event streams open through proxies that close silent connections.
const heartbeat = 15 * time.Second

// handleEvents streams a job's state as server-sent events: one "video.<status>" event with the
// job object now and at every change (progress, stage, status; a burst of changes comes as its
// latest state), ending after the event of a finished status.
func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request, id string) {
	v, changed, err := s.watch(id)
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
	for {
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
		if v, changed, err = s.watch(id); err != nil {
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

// watch returns a job's state and a channel closed at its next change (nil once finished).
func (s *Server) watch(id string) (*Video, <-chan struct{}, error) {
	s.mu.Lock()
	if j := s.active[id]; j != nil {
		v, changed := s.liveLocked(j), j.changed
		s.mu.Unlock()
		return v, changed, nil
	}
	s.mu.Unlock()
	v, _, err := s.st.get(id)
	return v, nil, err
}

func (s *Server) isStopping() bool {
	select {
	case <-s.stopping:
		return true
	default:
		return false
	}
}
