package server

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"time"

	"fastvideo/fastvideo"
)

// Job statuses, as in OpenAI's videos API.
const (
	statusQueued     = "queued"
	statusInProgress = "in_progress"
	statusCompleted  = "completed"
	statusFailed     = "failed"
	statusCancelled  = "cancelled"
)

// Video is a video job as the API shows it: OpenAI's video object (id, object, created_at,
// status, progress, model, seconds, size, completed_at, expires_at, error) plus the generation's
// own fields.
type Video struct {
	ID        string `json:"id"`
	Object    string `json:"object"` // always "video"
	CreatedAt int64  `json:"created_at"`
	Status    string `json:"status"`
	Progress  int    `json:"progress"` // 0-100
	Model     string `json:"model"`
	Prompt    string `json:"prompt"`
	// PromptUsed is the prompt the model ran on when enhance_prompt rewrote it (once completed).
	PromptUsed  string    `json:"prompt_used,omitempty"`
	Seconds     string    `json:"seconds"` // duration of the output, from the resolved frame count
	Size        string    `json:"size"`    // "WxH"
	StartedAt   *int64    `json:"started_at"`
	CompletedAt *int64    `json:"completed_at"`
	ExpiresAt   *int64    `json:"expires_at"`
	Error       *APIError `json:"error"`

	Width             int    `json:"width"`
	Height            int    `json:"height"`
	NumFrames         int    `json:"num_frames"`
	FPS               int    `json:"fps"`
	NumInferenceSteps int    `json:"num_inference_steps"`
	Seed              int64  `json:"seed"`
	Stage             string `json:"stage,omitempty"`          // the pipeline stage running now
	QueuePosition     *int   `json:"queue_position,omitempty"` // 1 is next; only while queued
	// Timings are the stage times in seconds (fastvideo.Timings' JSON), once completed.
	Timings json.RawMessage `json:"timings,omitempty"`
}

// APIError is OpenAI's error object: Param names the request field at fault.
type APIError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Param   string `json:"param,omitempty"`
	Type    string `json:"type,omitempty"`
}

func (v *Video) finished() bool {
	return v.Status == statusCompleted || v.Status == statusFailed || v.Status == statusCancelled
}

func (v *Video) fail(now time.Time, e *APIError) {
	v.Status, v.Error, v.Stage = statusFailed, e, ""
	v.CompletedAt = fastvideo.Ptr(now.Unix())
}

// newVideoID returns a fresh job id. Ids are the only names the server derives files from, so
// they come from here alone and requests can only name jobs that match idPattern.
func newVideoID() (string, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return "video_" + hex.EncodeToString(b[:]), nil
}

var idPattern = regexp.MustCompile(`^video_[0-9a-f]{24}$`)

// outputName is the file a job's video is written to inside the videos folder.
func outputName(id string) string { return id + ".mp4" }

// newVideo is a queued job for a planned request.
func newVideo(id, model string, req fastvideo.Request, plan *fastvideo.GenerationPlan, now time.Time) *Video {
	return &Video{
		ID: id, Object: "video", CreatedAt: now.Unix(), Status: statusQueued, Model: model, Prompt: req.Prompt,
		Seconds: formatSeconds(plan.NumFrames, plan.FPS), Size: fmt.Sprintf("%dx%d", plan.Width, plan.Height),
		Width: plan.Width, Height: plan.Height, NumFrames: plan.NumFrames, FPS: plan.FPS,
		NumInferenceSteps: plan.Steps, Seed: plan.Seed,
	}
}

func formatSeconds(frames, fps int) string {
	if fps <= 0 {
		return "0"
	}
	return strconv.FormatFloat(math.Round(1000*float64(frames)/float64(fps))/1000, 'f', -1, 64)
}

// Why a running generation's context was cancelled (context.Cause).
var (
	errCancelledByUser = errors.New("cancelled by a DELETE request")
	errShutdown        = errors.New("the server is shutting down")
	errJobTimeout      = errors.New("the per-job time limit ran out")
)

// errorOf turns a generation error and its context's cause into the job's error object.
func errorOf(err, cause error) *APIError {
	var re *fastvideo.RequestError
	switch {
	case errors.As(err, &re):
		return &APIError{Code: "invalid_request", Param: re.Field, Message: re.Error(), Type: "invalid_request_error"}
	case errors.Is(cause, errShutdown):
		return &APIError{Code: "server_shutdown", Message: "the server shut down before the video was finished; submit it again"}
	case errors.Is(cause, errJobTimeout):
		return &APIError{Code: "timeout", Message: "the generation ran past the server's per-job time limit"}
	}
	return &APIError{Code: "generation_failed", Message: err.Error(), Type: "server_error"}
}
