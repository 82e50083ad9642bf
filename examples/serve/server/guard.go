package server

import (
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// guarded protects every response against what a browser can be made to do: without an API key it
// answers only requests whose Host is an IP address, localhost or an allowed name (a DNS-rebinding
// page names its own domain, which resolves to this server), and refuses state-changing requests sent
// from another origin (a page elsewhere posting to localhost); with or without a key, every response
// says not to sniff its type and not to be framed.
func (s *Server) guarded(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Content-Security-Policy", "frame-ancestors 'none'")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		if s.cfg.APIKey == "" {
			if host := hostName(r.Host); !s.hostAllowed(host) {
				writeError(w, http.StatusForbidden, &APIError{Code: "host_not_allowed", Param: "Host", Message: "the Host " +
					strconv.Quote(host) + " is not this server's: without -api-key the server answers IP addresses, localhost " +
					"and the names given to -allowed-hosts (add it there, or set -api-key)"})
				return
			}
			if changesState(r.Method) && crossOrigin(r) {
				writeError(w, http.StatusForbidden, &APIError{Code: "cross_origin", Param: "Origin", Message: "a " + r.Method +
					" from another origin is refused without -api-key (a page elsewhere cannot drive this server)"})
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// hostAllowed reports whether host (no port) may name this server without an API key.
func (s *Server) hostAllowed(host string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if net.ParseIP(host) != nil || host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	return slices.ContainsFunc(s.cfg.AllowedHosts, func(a string) bool { return strings.EqualFold(strings.TrimSuffix(a, "."), host) })
}

// hostName is the host of a Host header, without its port or IPv6 brackets.
func hostName(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return strings.Trim(hostport, "[]")
}

func changesState(method string) bool {
	return method != http.MethodGet && method != http.MethodHead && method != http.MethodOptions
}

// crossOrigin reports a request a browser sent from a page of another origin: Sec-Fetch-Site says
// so, or Origin names another host than the request's ("null", a sandboxed or file page, included).
func crossOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site == "cross-site" || site == "same-site" {
		return true
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return false // not a browser's cross-origin request (curl, the SDK, a same-origin GET form)
	}
	u, err := url.Parse(origin)
	return err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host)
}
