package faultproxy_test

import (
	"bufio"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/approvald/approval/internal/faultproxy"
)

// echo starts a server that sends back every line it reads.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					c.Write([]byte(line))
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func TestFreezeHoldsThawForwardsResetDrops(t *testing.T) {
	p, err := faultproxy.Start(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	roundTrip := func(line string, within time.Duration) (string, error) {
		c.SetDeadline(time.Now().Add(within))
		if _, err := c.Write([]byte(line)); err != nil {
			return "", err
		}
		return r.ReadString('\n')
	}
	if got, err := roundTrip("one\n", 10*time.Second); err != nil || got != "one\n" {
		t.Fatalf("before a freeze: got %q, %v; want the line back", got, err)
	}

	p.Freeze()
	if got, err := roundTrip("two\n", 200*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("frozen: got %q, %v; want nothing back before the deadline", got, err)
	}
	p.Thaw()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "two\n" {
		t.Fatalf("thawed: got %q, %v; want the held line", got, err)
	}

	p.Reset()
	if got, err := roundTrip("three\n", 10*time.Second); err == nil {
		t.Fatalf("after a reset: got %q; want the connection dropped", got)
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	c2.SetDeadline(time.Now().Add(10 * time.Second))
	c2.Write([]byte("four\n"))
	if got, err := bufio.NewReader(c2).ReadString('\n'); err != nil || got != "four\n" {
		t.Fatalf("a new connection after a reset: got %q, %v; want the line back", got, err)
	}
}
