package server

import (
	_ "embed"
	"net/http"
)

// page is the browser front end: plain HTML and JavaScript over the same API as any client.
//
//go:embed page/index.html
var page []byte

func servePage(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; media-src 'self' blob:; img-src 'self' data:; frame-ancestors 'none'")
	w.Write(page)
}
