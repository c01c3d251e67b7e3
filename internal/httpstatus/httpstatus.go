// Package httpstatus records the status code a handler wrote, for the request logs of the API
// (httpapi) and of the pages (web), which write the same line (docs/operations.md, "Logs").
package httpstatus

import "net/http"

// Writer records the status code written through it.
type Writer struct {
	http.ResponseWriter
	status int
}

// WriteHeader records code, the first one written, and passes it on.
func (w *Writer) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write records 200 when no status was written before, and passes b on.
func (w *Writer) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *Writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Written reports whether anything was written: a status or a body.
func (w *Writer) Written() bool { return w.status != 0 }

// Code is the status the client got: 200 when the handler wrote nothing.
func (w *Writer) Code() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}
