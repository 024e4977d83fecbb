// Command nullextender is a scheduler extender that does nothing, written in Go: the floor of what one HTTP round
// trip per pod costs kube-scheduler on a machine, whatever the extender's language. It reads each request's body
// (any extender must) and answers a POST with [] (no node scored) and a GET with ok, keep-alive, on 127.0.0.1.
// The scheduling benchmark (bench/scheduling_bench.py, --floor) runs it beside the Python null extender.
//
// Two probes (the benchmark's --probes) tell apart what an extender's answer costs kube-scheduler: --delay answers
// that long after the body has arrived (latency with no work), and --answer-nodes decodes the request and scores
// that many of the nodes it names (the work and the answer's length of a real extender, with no view behind it).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// request is what the probe reads of kube-scheduler's ExtenderArgs (nodeCacheCapable: node names, not nodes).
type request struct {
	NodeNames []string `json:"nodenames"`
}

// hostPriority is one entry of the answer, as kube-scheduler's HostPriorityList spells it.
type hostPriority struct {
	Host  string `json:"Host"`
	Score int64  `json:"Score"`
}

type extender struct {
	delay       time.Duration
	answerNodes int
}

// scores is the answer to a verb: [] without --answer-nodes, else the first nodes named, scored 1 to 9 in turn.
func (e extender) scores(body []byte) ([]byte, error) {
	if e.answerNodes == 0 {
		return []byte("[]"), nil
	}
	var args request
	if err := json.Unmarshal(body, &args); err != nil {
		return nil, err
	}
	answer := make([]hostPriority, 0, e.answerNodes)
	for index, name := range args.NodeNames {
		if index == e.answerNodes {
			break
		}
		answer = append(answer, hostPriority{Host: name, Score: int64(1 + index%9)})
	}
	return json.Marshal(answer)
}

func (e extender) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "unreadable body", http.StatusBadRequest)
		return
	}
	if r.Method == http.MethodPost {
		answer, err := e.scores(body)
		if err != nil {
			http.Error(w, "the body is not ExtenderArgs: "+err.Error(), http.StatusBadRequest)
			return
		}
		if e.delay > 0 {
			time.Sleep(e.delay)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(answer)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write([]byte("ok\n"))
}

func main() {
	port := flag.Int("port", 0, "port to listen on (127.0.0.1)")
	delay := flag.Duration("delay", 0, "answer a verb this long after its body arrived (e.g. 300us)")
	answerNodes := flag.Int("answer-nodes", 0, "decode each verb's body and score this many of the nodes it names")
	flag.Parse()
	if *port <= 0 || *port > 65535 {
		fmt.Fprintln(os.Stderr, "nullextender: --port must be a port number (1-65535)")
		os.Exit(2)
	}
	if *delay < 0 || *answerNodes < 0 {
		fmt.Fprintln(os.Stderr, "nullextender: --delay and --answer-nodes must not be negative")
		os.Exit(2)
	}
	handler := extender{delay: *delay, answerNodes: *answerNodes}
	server := &http.Server{Addr: fmt.Sprintf("127.0.0.1:%d", *port), Handler: handler}
	if err := server.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, "nullextender:", err)
		os.Exit(1)
	}
}
