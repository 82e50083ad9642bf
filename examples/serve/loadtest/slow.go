package main

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"
)

// slowAttack opens n connections to base from the loopback address from (another client than the
// measuring one), each sending a create request's headers and one byte of a 1000-byte body, then
// times a normal client's request from the default address while they are open.
func slowAttack(base, from string, n int) error {
	host := strings.TrimPrefix(strings.TrimPrefix(base, "http://"), "https://")
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	var open []net.Conn
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	refused := 0
	for range n {
		c, err := d.Dial("tcp", host)
		if err != nil {
			refused++
			continue
		}
		if _, err := fmt.Fprintf(c, "POST /v1/videos HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{", host); err != nil {
			refused++
		}
		open = append(open, c)
	}
	t0 := time.Now()
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(base + "/v1/models")
	if err != nil {
		return fmt.Errorf("a normal client beside %d slow connections: %w", n, err)
	}
	resp.Body.Close()
	fmt.Printf("slow clients: %d connections from %s (%d refused at once); a normal client was served (%d) in %.1f ms\n",
		n, from, refused, resp.StatusCode, float64(time.Since(t0).Microseconds())/1000)
	return nil
}
