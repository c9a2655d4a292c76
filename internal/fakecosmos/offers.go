package fakecosmos

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"net/http"
	"sort"
	"strconv"
	"strings"
)

// Offers: the throughput of a database or a container, as the service keeps
// it in an offer resource (offerVersion "V2") of the account's offers feed.
// A provisioned account gives every container made without a throughput
// header 400 RU/s of its own, unless its database has throughput that its
// containers share; a serverless account has no offers at all.

// The throughput headers of a create.
const (
	hdrOfferThroughput    = "x-ms-offer-throughput"
	hdrOfferAutopilot     = "x-ms-cosmos-offer-autopilot-settings"
	defaultContainerRUs   = 400 // what a container with no header and no shared throughput gets
	minManualRUs          = 400
	manualRUsStep         = 100
	minAutoscaleMaxRUs    = 1000
	autoscaleMaxRUsStep   = 1000
	maxThroughputRUs      = 1000000
	msgServerlessOffers   = "Reading or replacing offers is not supported for serverless accounts."
	msgServerlessCreate   = "Setting offer throughput or autopilot on container is not supported for serverless accounts."
	msgServerlessSharedDB = "Shared throughput database creation is not supported for serverless accounts."
)

// offer is one offer resource. Manual offers set throughput, autoscale
// ones maxThroughput; the other is 0.
type offer struct {
	rid           string
	throughput    int
	maxThroughput int
	ts            int64
	etag          string
}

// resource renders the offer as the offers feed lists it, for the resource
// whose self link and rid it names.
func (o *offer) resource(selfLink, resourceRID string) map[string]any {
	content := map[string]any{}
	if o.maxThroughput > 0 {
		content["offerAutopilotSettings"] = map[string]any{"maxThroughput": o.maxThroughput}
	} else {
		content["offerThroughput"] = o.throughput
	}
	return map[string]any{
		"id":              o.rid,
		"_rid":            o.rid,
		"_self":           "offers/" + o.rid + "/",
		"_etag":           o.etag,
		"_ts":             o.ts,
		"offerVersion":    "V2",
		"offerType":       "Invalid",
		"content":         content,
		"resource":        selfLink,
		"offerResourceId": resourceRID,
	}
}

// offerRID is a short rid of its own kind, as the service's offer ids are
// ("Hu+t"): four characters, '/' written as '-' like every rid here.
func (g *idSource) offerRID() string {
	raw := binary.BigEndian.AppendUint32(nil, uint32(g.next.Add(1)))
	return strings.ReplaceAll(base64.RawStdEncoding.EncodeToString(raw[1:]), "/", "-")
}

// parseOfferHeaders reads the throughput a create asks for: nil when it
// asks for none. Both headers at once, or values outside the service's
// documented ranges (manual: at least 400 RU/s in steps of 100; autoscale:
// a maximum of at least 1,000 RU/s in steps of 1,000), answer 400.
func (s *Server) parseOfferHeaders(q *request, serverlessRefusal string) (*offer, error) {
	manual, auto := q.header(hdrOfferThroughput), q.header(hdrOfferAutopilot)
	if manual == "" && auto == "" {
		return nil, nil
	}
	if s.serverless {
		return nil, badRequest("%s", serverlessRefusal)
	}
	if manual != "" && auto != "" {
		return nil, badRequest("Only one of %s or %s may be specified.", hdrOfferThroughput, hdrOfferAutopilot)
	}
	ts := s.now().Unix()
	o := &offer{rid: s.ids.offerRID(), ts: ts, etag: s.ids.etag(ts)}
	if manual != "" {
		n, err := strconv.Atoi(strings.TrimSpace(manual))
		if err != nil || n < minManualRUs || n > maxThroughputRUs || n%manualRUsStep != 0 {
			return nil, badRequest("The offer throughput %q is invalid: it must be between %d and %d RU/s, in steps of %d.",
				manual, minManualRUs, maxThroughputRUs, manualRUsStep)
		}
		o.throughput = n
		return o, nil
	}
	var settings struct {
		MaxThroughput json.Number `json:"maxThroughput"`
	}
	if err := json.Unmarshal([]byte(auto), &settings); err != nil {
		return nil, badRequest("The %s header is not valid JSON: %v", hdrOfferAutopilot, err)
	}
	n, err := strconv.Atoi(settings.MaxThroughput.String())
	if err != nil || n < minAutoscaleMaxRUs || n > maxThroughputRUs || n%autoscaleMaxRUsStep != 0 {
		return nil, badRequest("The autoscale maxThroughput %q is invalid: it must be between %d and %d RU/s, in steps of %d.",
			settings.MaxThroughput, minAutoscaleMaxRUs, maxThroughputRUs, autoscaleMaxRUsStep)
	}
	o.maxThroughput = n
	return o, nil
}

// containerOffer is the offer of a new container in d: the one its
// headers ask for, none where the database's is shared (or the account is
// serverless), else the service's default of 400 RU/s. Call with s.mu held.
func (s *Server) containerOffer(q *request, d *database) (*offer, error) {
	o, err := s.parseOfferHeaders(q, msgServerlessCreate)
	if err != nil || o != nil || s.serverless || d.offer != nil {
		return o, err
	}
	ts := s.now().Unix()
	return &offer{rid: s.ids.offerRID(), throughput: defaultContainerRUs, ts: ts, etag: s.ids.etag(ts)}, nil
}

// offerResources lists every offer of the account, oldest resource first.
func (s *Server) offerResources() []map[string]any {
	s.mu.RLock()
	defer s.mu.RUnlock()
	type owned struct {
		created uint64
		res     map[string]any
	}
	var all []owned
	for _, d := range s.databases {
		if d.offer != nil {
			all = append(all, owned{d.created, d.offer.resource("dbs/"+d.rid+"/", d.rid)})
		}
		for _, c := range d.colls {
			if c.offer != nil {
				all = append(all, owned{c.created, c.offer.resource(c.selfLink(), c.rid)})
			}
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].created < all[j].created })
	out := make([]map[string]any, len(all))
	for i, o := range all {
		out[i] = o.res
	}
	return out
}

// refuseOffersOnServerless is a serverless account's answer to any request
// on the offers feed.
func (s *Server) refuseOffersOnServerless() error {
	if s.serverless {
		return badRequest("%s", msgServerlessOffers)
	}
	return nil
}

// listOffers answers GET /offers, and POST /offers with a query (the SDKs'
// ReadThroughput: SELECT * FROM root WHERE root.offerResourceId = @rid).
func (s *Server) listOffers(q *request) (*result, error) {
	if err := s.refuseOffersOnServerless(); err != nil {
		return nil, err
	}
	return metadataFeed(q, "", "Offers", s.offerResources())
}

// readOffer answers GET /offers/{rid}.
func (s *Server) readOffer(q *request) (*result, error) {
	if err := s.refuseOffersOnServerless(); err != nil {
		return nil, err
	}
	for _, o := range s.offerResources() {
		if o["_rid"] == q.route.item {
			return &result{status: http.StatusOK, body: encodeJSON(o), etag: o["_etag"].(string), charge: chargeMetadata}, nil
		}
	}
	return nil, notFound()
}
