// Package mailtest is a real SMTP server on loopback for tests (emersion/go-smtp), which keeps
// every mail it accepts. A mail is kept before the server answers 250 to its DATA, so a
// client that learned of the acceptance finds it here; a connection cut mid-DATA keeps
// nothing.
package mailtest

import (
	"io"
	"log"
	"net"
	"slices"
	"sync"
	"testing"

	"github.com/emersion/go-smtp"
)

// Mail is one accepted mail, once per recipient.
type Mail struct {
	To   string
	Data []byte
}

// Server is the SMTP server; Port is where it listens on 127.0.0.1.
type Server struct {
	Port int

	mu       sync.Mutex
	mails    []Mail
	refusals map[string]error
}

// Start starts a server that stops when the test ends. Connection errors (a client killed
// mid-conversation) are not logged.
func Start(tb testing.TB) *Server {
	tb.Helper()
	s := &Server{refusals: map[string]error{}}
	srv := smtp.NewServer(s)
	srv.Domain = "localhost"
	srv.ErrorLog = log.New(io.Discard, "", 0)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	s.Port = ln.Addr().(*net.TCPAddr).Port
	go srv.Serve(ln)
	tb.Cleanup(func() { srv.Close() })
	return s
}

// Refuse makes the server answer err to the recipient to from now on; a nil err accepts
// them again.
func (s *Server) Refuse(to string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		delete(s.refusals, to)
	} else {
		s.refusals[to] = err
	}
}

// Mails returns the mails accepted so far, in order.
func (s *Server) Mails() []Mail {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.mails)
}

// Recipients returns the recipient of each mail accepted so far, sorted.
func (s *Server) Recipients() []string {
	var to []string
	for _, m := range s.Mails() {
		to = append(to, m.To)
	}
	slices.Sort(to)
	return to
}

// NewSession starts a conversation; see smtp.Backend.
func (s *Server) NewSession(*smtp.Conn) (smtp.Session, error) { return &session{srv: s}, nil }

type session struct {
	srv *Server
	to  []string
}

func (s *session) Reset()                               { s.to = nil }
func (s *session) Logout() error                        { return nil }
func (s *session) Mail(string, *smtp.MailOptions) error { return nil }

func (s *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	s.srv.mu.Lock()
	defer s.srv.mu.Unlock()
	if err := s.srv.refusals[to]; err != nil {
		return err
	}
	s.to = append(s.to, to)
	return nil
}

func (s *session) Data(r io.Reader) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	s.srv.mu.Lock()
	defer s.srv.mu.Unlock()
	for _, to := range s.to {
		s.srv.mails = append(s.srv.mails, Mail{To: to, Data: data})
	}
	return nil
}
