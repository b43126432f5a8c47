package faultproxy_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/syncd-dev/syncd/soak/faultproxy"
)

// Example puts the proxy in front of an echo server, then breaks the network.
func Example() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ln.Close()
	go func() { // echo server: one goroutine per connection
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()

	p, err := faultproxy.New(ln.Addr().String(), faultproxy.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()

	c, err := net.Dial("tcp", p.Addr()) // clients dial the proxy, not the server
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	_, _ = c.Write([]byte("hello"))
	buf := make([]byte, 5)
	_, _ = io.ReadFull(c, buf)
	fmt.Printf("echoed %q\n", buf)

	fmt.Println("reset connections:", p.ResetAll())
	_, err = c.Read(buf)
	fmt.Println("client sees a reset:", errors.Is(err, syscall.ECONNRESET))
	// Output:
	// echoed "hello"
	// reset connections: 1
	// client sees a reset: true
}

// ExampleProxy_CutNextAfter loses an acknowledgement: the server commits the
// request, and the client sees its connection reset instead of the answer, so
// it cannot know whether the write was applied.
func ExampleProxy_CutNextAfter() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ln.Close()
	committed := make(chan string, 1)
	go func() { // a server that commits one line and acknowledges it
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			return
		}
		committed <- strings.TrimSpace(line)
		_, _ = c.Write([]byte("ok\n"))
		_, _ = io.Copy(io.Discard, c) // until the proxy resets the connection
	}()

	p, err := faultproxy.New(ln.Addr().String(), faultproxy.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	p.CutNextAfter(faultproxy.Down, 0) // no byte may reach the client

	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	_, _ = fmt.Fprintln(c, "put k=v")
	_, err = bufio.NewReader(c).ReadString('\n')

	fmt.Println("server committed:", <-committed)
	fmt.Println("client sees a reset:", errors.Is(err, syscall.ECONNRESET))
	fmt.Println("cuts:", p.Stats().Cuts)
	// Output:
	// server committed: put k=v
	// client sees a reset: true
	// cuts: 1
}
