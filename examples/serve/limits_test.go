package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// dialFrom connects to addr from the loopback address local (127.0.0.x: another client).
func dialFrom(t *testing.T, local, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestSlowClientsCannotStarveOthers: a client holding many connections that trickle their bodies
// (and more idle ones than its share) keeps neither a normal client from being served within 2 s nor
// its own slow bodies past -body-timeout (408); its connections past its share are closed at once.
func TestSlowClientsCannotStarveOthers(t *testing.T) {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	addr := make(chan string, 1)
	done := make(chan int, 1)
	var stderr bytes.Buffer
	go func() {
		done <- run(ctx, []string{"-addr", "127.0.0.1:0", "-backend", "go:ops_sequential", "-data", t.TempDir(),
			"-max-conns-per-client", "8", "-max-conns", "64", "-body-timeout", "300ms"}, "", &stderr, func(a string) { addr <- a })
	}()
	var base string
	select {
	case base = <-addr:
	case code := <-done:
		t.Fatalf("the server stopped (%d): %s", code, stderr.String())
	}
	const attackers = 100
	var slow []net.Conn
	for range attackers {
		c := dialFrom(t, "127.0.0.2", base)
		fmt.Fprintf(c, "POST /v1/videos HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
		slow = append(slow, c)
	}
	defer func() {
		for _, c := range slow {
			c.Close()
		}
	}()
	t0 := time.Now()
	client := &http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get("http://" + base + "/v1/models")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("a normal client beside %d slow connections: %v (after %v)", attackers, err, time.Since(t0))
	}
	resp.Body.Close()
	// Every slow connection ends: past the share at once, the others with 408 after the body timeout.
	answered, closed := 0, 0
	for _, c := range slow {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 64)
		n, _ := c.Read(buf)
		switch {
		case strings.HasPrefix(string(buf[:n]), "HTTP/1.1 408"):
			answered++
		case n == 0:
			closed++
		default:
			t.Errorf("a slow connection got %q", buf[:n])
		}
	}
	if answered == 0 || answered > 8 || answered+closed != attackers {
		t.Errorf("%d slow bodies answered 408, %d connections closed; want at most the 8 of the share answered", answered, closed)
	}
	stop()
	if code := <-done; code != 0 {
		t.Errorf("exit %d: %s", code, stderr.String())
	}
}
