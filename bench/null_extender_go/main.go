// Command nullextender is a scheduler extender that does nothing, written in Go: the floor of what one HTTP round
// trip per pod costs kube-scheduler on a machine, whatever the extender's language. It reads each request's body
// (any extender must) and answers a POST with [] (no node scored) and a GET with ok, keep-alive, on 127.0.0.1.
// The scheduling benchmark (bench/scheduling_bench.py, --floor) runs it beside the Python null extender.
package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
)

func answer(w http.ResponseWriter, r *http.Request) {
	if _, err := io.Copy(io.Discard, r.Body); err != nil {
		http.Error(w, "unreadable body", http.StatusBadRequest)
		return
	}
	if r.Method == http.MethodPost {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte("[]"))
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write([]byte("ok\n"))
}

func main() {
	port := flag.Int("port", 0, "port to listen on (127.0.0.1)")
	flag.Parse()
	if *port <= 0 || *port > 65535 {
		fmt.Fprintln(os.Stderr, "nullextender: --port must be a port number (1-65535)")
		os.Exit(2)
	}
	server := &http.Server{Addr: fmt.Sprintf("127.0.0.1:%d", *port), Handler: http.HandlerFunc(answer)}
	if err := server.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, "nullextender:", err)
		os.Exit(1)
	}
}
