package fakecosmos

import "net/http"

// The gateway's HTTP front end refuses a request whose request line and
// headers together pass 16 KB before the service sees it: 400 with the
// front end's HTML page "Bad Request - Request Too Long ... The size of the
// request headers is too long", no substatus and no activity id (the
// Windows HTTP server's MaxRequestBytes, 16 KB by default). A client that
// sends the session token of every range meets it on containers with
// hundreds of ranges; some front ends answer 431 instead, with no body.

// DefaultMaxRequestHeaderBytes is the gateway's limit on a request's line
// and headers.
const DefaultMaxRequestHeaderBytes = 16 * 1024

const requestTooLongPage = `<!DOCTYPE HTML PUBLIC "-//W3C//DTD HTML 4.01//EN""http://www.w3.org/TR/html4/strict.dtd">` +
	"\r\n<HTML><HEAD><TITLE>Bad Request</TITLE>\r\n" +
	`<META HTTP-EQUIV="Content-Type" Content="text/html; charset=us-ascii"></HEAD>` +
	"\r\n<BODY><h2>Bad Request - Request Too Long</h2>\r\n<hr><p>HTTP Error 400. The size of the request headers is too long.</p>\r\n</BODY></HTML>\r\n"

// requestHeaderBytes is the size of r's request line and headers as they
// crossed the wire in HTTP/1.1.
func requestHeaderBytes(r *http.Request) int {
	n := len(r.Method) + 1 + len(r.URL.RequestURI()) + 1 + len(r.Proto) + 2
	n += len("Host: ") + len(r.Host) + 2
	for name, values := range r.Header {
		for _, v := range values {
			n += len(name) + 2 + len(v) + 2
		}
	}
	return n + 2
}

// refuseOversizedHeaders answers as the gateway's front end does when r's
// headers pass the limit; nil otherwise.
func (s *Server) refuseOversizedHeaders(r *http.Request) *response {
	if s.maxHeaderBytes <= 0 || requestHeaderBytes(r) <= s.maxHeaderBytes {
		return nil
	}
	body := []byte(requestTooLongPage)
	h := http.Header{}
	h.Set("Content-Type", "text/html; charset=us-ascii")
	return &response{status: http.StatusBadRequest, header: h, body: body}
}
