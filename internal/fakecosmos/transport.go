package fakecosmos

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strconv"
)

// Transport returns an http.RoundTripper that serves requests in-process,
// with no sockets. It honours the request's context: a cancellation during
// the latency wait returns the context's error without executing. A dropped
// connection (FaultDropConnection, FaultLoseResponse) surfaces as an error
// wrapping io.ErrUnexpectedEOF, as a real transport reports a connection
// closed before the response.
func (s *Server) Transport() http.RoundTripper { return transport{s} }

type transport struct{ s *Server }

func (t transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		// A RoundTripper must close the body; handle reads it first.
		defer req.Body.Close()
	}
	resp := t.s.handle(req)
	if resp == nil {
		return nil, fmt.Errorf("fakecosmos: %s %s: %w", req.Method, req.URL.Path, req.Context().Err())
	}
	if resp.drop {
		return nil, fmt.Errorf("fakecosmos: %s %s: connection closed before the response: %w", req.Method, req.URL.Path, io.ErrUnexpectedEOF)
	}
	header := resp.header.Clone()
	if bodyAllowed(resp.status) {
		header.Set("Content-Length", strconv.Itoa(len(resp.body)))
	}
	return &http.Response{
		Status:        strconv.Itoa(resp.status) + " " + http.StatusText(resp.status),
		StatusCode:    resp.status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        header,
		Body:          io.NopCloser(bytes.NewReader(resp.body)),
		ContentLength: int64(len(resp.body)),
		Request:       req,
	}, nil
}
