package main

import (
	"fmt"
	"net"
	"net/http"
	_ "net/http/pprof"
	"time"

	"github.com/duroxide-go/cdb/internal/fakecosmos"
)

func main() {
	go http.ListenAndServe("127.0.0.1:6060", nil)
	ln, _ := net.Listen("tcp", "127.0.0.1:8089")
	srv := fakecosmos.New(fakecosmos.Options{Latency: 70 * time.Millisecond, Endpoint: "http://127.0.0.1:8089/"})
	fmt.Println(srv.Key())
	hs := &http.Server{Handler: srv}
	hs.Serve(ln)
}
