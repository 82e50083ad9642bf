package main

import (
	"net"
	"sync"
)

// Connection limits (README, "Serving: limits"): a client may hold perClient connections at once and
// the server all of them together; a connection past its client's share is closed at once, one past
// the total waits in the kernel's backlog until another ends. With ReadHeaderTimeout and
// ReadTimeout (the http.Server's) a slow client holds each of its connections for at most that long.
const (
	defaultMaxConns  = 512
	defaultPerClient = 32
)

// limitListener bounds the connections it hands out, in all and per client IP address.
type limitListener struct {
	net.Listener
	slots     chan struct{}
	perClient int
	mu        sync.Mutex
	open      map[string]int
}

func newLimitListener(l net.Listener, total, perClient int) *limitListener {
	return &limitListener{Listener: l, slots: make(chan struct{}, total), perClient: perClient, open: map[string]int{}}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		l.slots <- struct{}{}
		c, err := l.Listener.Accept()
		if err != nil {
			<-l.slots
			return nil, err
		}
		ip := clientIP(c)
		l.mu.Lock()
		ok := l.open[ip] < l.perClient
		if ok {
			l.open[ip]++
		}
		l.mu.Unlock()
		if ok {
			return &limitedConn{Conn: c, release: func() { l.release(ip) }}, nil
		}
		c.Close() // over its client's share: the others' slots stay free
		<-l.slots
	}
}

func (l *limitListener) release(ip string) {
	l.mu.Lock()
	if l.open[ip]--; l.open[ip] <= 0 {
		delete(l.open, ip)
	}
	l.mu.Unlock()
	<-l.slots
}

func clientIP(c net.Conn) string {
	if host, _, err := net.SplitHostPort(c.RemoteAddr().String()); err == nil {
		return host
	}
	return c.RemoteAddr().String()
}

// limitedConn gives its slot back once, when closed.
type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
