package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// client speaks the videos API.
type client struct{ base string }

// video is the part of the job object the load test reads.
type video struct {
	ID       string `json:"id"`
	Status   string `json:"status"`
	Progress int    `json:"progress"`
}

func finished(status string) bool {
	return status == "completed" || status == "failed" || status == "cancelled"
}

// job submits job i (retrying after 429), cancels it if it is one of every each-th, and follows
// it to its end.
func (c client) job(i, each int) outcome {
	var o outcome
	if each > 0 && i%each == each-1 {
		o.cancel = map[bool]string{true: "queued", false: "running"}[(i/each)%2 == 0]
	}
	v, accepted, err := c.submit(fmt.Sprintf(`{"prompt": "load test %d", "seed": %d}`, i, i), &o.rejections)
	if err != nil {
		o.submitError = err
		return o
	}
	o.id = v.ID
	switch o.cancel {
	case "queued":
		err = c.delete(v.ID)
	case "running":
		err = c.follow(v.ID, func(v video) bool { return v.Status != "queued" })
		if err == nil {
			err = c.delete(v.ID)
		}
	}
	if err == nil {
		err = c.follow(v.ID, func(v video) bool { o.status = v.Status; return finished(v.Status) })
	}
	if err != nil {
		o.submitError = err
	}
	o.latency = time.Since(accepted)
	return o
}

// submit posts a job until the queue takes it.
func (c client) submit(body string, rejections *int) (video, time.Time, error) {
	for {
		resp, err := http.Post(c.base+"/v1/videos", "application/json", strings.NewReader(body))
		if err != nil {
			return video{}, time.Time{}, err
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			var v video
			err := json.Unmarshal(data, &v)
			return v, time.Now(), err
		case http.StatusTooManyRequests:
			*rejections++
			wait, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
			time.Sleep(time.Duration(max(wait, 1)) * time.Second)
		default:
			return video{}, time.Time{}, fmt.Errorf("POST: %d %s", resp.StatusCode, data)
		}
	}
}

// follow reads a job's event stream until done says so or the stream ends.
func (c client) follow(id string, done func(video) bool) error {
	resp, err := http.Get(c.base + "/v1/videos/" + id + "/events")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("events of %s: %d", id, resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var v video
			if err := json.Unmarshal([]byte(data), &v); err != nil {
				return err
			}
			if done(v) {
				return nil
			}
		}
	}
	return sc.Err()
}

func (c client) delete(id string) error {
	req, _ := http.NewRequest(http.MethodDelete, c.base+"/v1/videos/"+id, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("DELETE %s: %d", id, resp.StatusCode)
	}
	return nil
}

func (c client) get(id string) (video, error) {
	resp, err := http.Get(c.base + "/v1/videos/" + id)
	if err != nil {
		return video{}, err
	}
	defer resp.Body.Close()
	var v video
	err = json.NewDecoder(resp.Body).Decode(&v)
	return v, err
}
