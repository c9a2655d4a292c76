package cdb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// Throughput: what a container may spend per second. Cosmos DB keeps it in
// an offer resource of the account's offers feed, one per container with
// throughput of its own and one per database whose throughput its
// containers share. ReadThroughput finds it as the azcosmos SDK's
// ReadThroughput does: a query of the offers feed for the resource's _rid.
// A serverless account has no offers; the service says so with a 400,
// which is how a data-plane client tells serverless apart (the account's
// capabilities, EnableServerless among them, are only on the management
// plane).

// ThroughputMode is how a container's throughput is provisioned.
type ThroughputMode string

// The throughput modes.
const (
	// ThroughputManual is a fixed number of RU/s, billed per hour.
	ThroughputManual ThroughputMode = "manual"
	// ThroughputAutoscale scales each hour between a tenth of its maximum
	// and its maximum, billed for the highest RU/s reached in the hour at
	// 1.5 times the manual rate.
	ThroughputAutoscale ThroughputMode = "autoscale"
	// ThroughputServerless is billed per RU consumed, with no provisioned
	// RU/s; a container serves up to ServerlessContainerRUPerSecond.
	ThroughputServerless ThroughputMode = "serverless"
)

// ServerlessContainerRUPerSecond is the most RU/s a container of a
// serverless account serves (Microsoft documents 5,000 RU/s per container,
// up to 250 GB of data).
const ServerlessContainerRUPerSecond = 5000

// ThroughputProperties is a container's or a database's throughput.
type ThroughputProperties struct {
	Mode ThroughputMode
	// RUPerSecond is the provisioned RU/s for ThroughputManual, the
	// maximum for ThroughputAutoscale, and the container's ceiling,
	// ServerlessContainerRUPerSecond, for ThroughputServerless.
	RUPerSecond int
	// Shared says the throughput is the database's, shared by the
	// containers that have none of their own.
	Shared bool
}

// NewManualThroughputProperties is ru RU/s provisioned (at least 400, in
// steps of 100), for CreateWithThroughput and CreateDatabaseWithThroughput.
func NewManualThroughputProperties(ru int) ThroughputProperties {
	return ThroughputProperties{Mode: ThroughputManual, RUPerSecond: ru}
}

// NewAutoscaleThroughputProperties is autoscale up to maxRU RU/s (at least
// 1,000, in steps of 1,000).
func NewAutoscaleThroughputProperties(maxRU int) ThroughputProperties {
	return ThroughputProperties{Mode: ThroughputAutoscale, RUPerSecond: maxRU}
}

// ErrNoThroughput is the answer of ReadThroughput when neither the
// container nor its database has an offer, which a Cosmos DB account with
// provisioned throughput never gives.
var ErrNoThroughput = errors.New("no offer for the container or its database")

// The throughput headers of a create.
const (
	headerOfferThroughput = "x-ms-offer-throughput"
	headerOfferAutopilot  = "x-ms-cosmos-offer-autopilot-settings"
)

// header is the create request's throughput header.
func (t ThroughputProperties) header(op string) (http.Header, error) {
	h := http.Header{}
	switch {
	case t.RUPerSecond <= 0:
		return nil, invalid(op, "throughput", ErrInvalidContainerProperties, "RU/s must be positive, got %d", t.RUPerSecond)
	case t.Mode == ThroughputManual:
		h.Set(headerOfferThroughput, strconv.Itoa(t.RUPerSecond))
	case t.Mode == ThroughputAutoscale:
		h.Set(headerOfferAutopilot, fmt.Sprintf(`{"maxThroughput":%d}`, t.RUPerSecond))
	default:
		return nil, invalid(op, "throughput", ErrInvalidContainerProperties, "mode %q: want manual or autoscale", t.Mode)
	}
	return h, nil
}

// CreateWithThroughput creates the container with throughput of its own,
// manual or autoscale, as Create does otherwise (409 if it exists). A
// serverless account refuses it.
func (cc *ContainerClient) CreateWithThroughput(ctx context.Context, props ContainerProperties, t ThroughputProperties) (ContainerProperties, error) {
	h, err := t.header("CreateContainer")
	if err != nil {
		return ContainerProperties{}, err
	}
	return cc.create(ctx, props, h)
}

// CreateDatabaseWithThroughput creates database id with throughput that
// its containers without throughput of their own share (409 if it
// exists). A serverless account refuses it.
func (c *Client) CreateDatabaseWithThroughput(ctx context.Context, id string, t ThroughputProperties) (DatabaseProperties, error) {
	const op = "CreateDatabase"
	var props DatabaseProperties
	if err := validateName(op, "database id", id); err != nil {
		return props, err
	}
	h, err := t.header(op)
	if err != nil {
		return props, err
	}
	body, err := json.Marshal(map[string]string{"id": id})
	if err != nil {
		return props, fmt.Errorf("cdb: %s: %w", op, err)
	}
	resp, err := c.send(ctx, &request{operation: op, method: http.MethodPost, ref: databasesFeedRef(), header: h, body: body})
	if err != nil {
		return props, err
	}
	return props, decodeJSON(op, resp.Body, &props)
}

// ReadThroughput reads the container's throughput: its own offer, else
// its database's (Shared), or ThroughputServerless on a serverless account.
// It reads the container and the offers feed, and the database when the
// container has no offer of its own: two to four requests.
func (cc *ContainerClient) ReadThroughput(ctx context.Context) (ThroughputProperties, error) {
	const op = "ReadThroughput"
	props, err := cc.readProperties(ctx, "ReadContainer", nil)
	if err != nil {
		return ThroughputProperties{}, err
	}
	t, found, err := cc.client.queryOffer(ctx, props.ResourceID)
	if isServerlessRefusal(err) {
		return ThroughputProperties{Mode: ThroughputServerless, RUPerSecond: ServerlessContainerRUPerSecond}, nil
	}
	if err != nil || found {
		return t, err
	}
	db, err := cc.client.ReadDatabase(ctx, cc.databaseID)
	if err != nil {
		return ThroughputProperties{}, err
	}
	t, found, err = cc.client.queryOffer(ctx, db.ResourceID)
	if err != nil {
		return ThroughputProperties{}, err
	}
	if !found {
		return ThroughputProperties{}, fmt.Errorf("cdb: %s: container %q of database %q: %w", op, cc.id, cc.databaseID, ErrNoThroughput)
	}
	t.Shared = true
	return t, nil
}

// offerQuery is the azcosmos SDKs' query for a resource's offer.
const offerQuery = "SELECT * FROM root WHERE root.offerResourceId = @rid"

// offerWire is an offer resource as the offers feed answers it; V2 offers
// carry either a manual or an autoscale content.
type offerWire struct {
	OfferVersion string `json:"offerVersion"`
	Content      struct {
		OfferThroughput        *int `json:"offerThroughput"`
		OfferAutopilotSettings *struct {
			MaxThroughput int `json:"maxThroughput"`
		} `json:"offerAutopilotSettings"`
	} `json:"content"`
}

// queryOffer asks the offers feed for the offer of the resource whose
// _rid is rid; found is false when it has none.
func (c *Client) queryOffer(ctx context.Context, rid string) (t ThroughputProperties, found bool, err error) {
	const op = "QueryOffers"
	body, err := json.Marshal(map[string]any{
		"query":      offerQuery,
		"parameters": []map[string]string{{"name": "@rid", "value": rid}},
	})
	if err != nil {
		return t, false, fmt.Errorf("cdb: %s: %w", op, err)
	}
	h := http.Header{}
	h.Set("x-ms-documentdb-isquery", "True")
	h.Set("x-ms-documentdb-query", "True")
	resp, err := c.send(ctx, &request{operation: op, method: http.MethodPost, ref: offersFeedRef(), header: h, body: body,
		contentType: "application/query+json", idempotent: true})
	if err != nil {
		return t, false, err
	}
	var feed struct {
		Offers []offerWire `json:"Offers"`
	}
	if err := decodeJSON(op, resp.Body, &feed); err != nil {
		return t, false, err
	}
	if len(feed.Offers) == 0 {
		return t, false, nil
	}
	t, err = feed.Offers[0].throughput(op)
	return t, err == nil, err
}

// throughput reads a V2 offer's content.
func (o offerWire) throughput(op string) (ThroughputProperties, error) {
	switch {
	case o.Content.OfferAutopilotSettings != nil:
		return NewAutoscaleThroughputProperties(o.Content.OfferAutopilotSettings.MaxThroughput), nil
	case o.Content.OfferThroughput != nil:
		return NewManualThroughputProperties(*o.Content.OfferThroughput), nil
	}
	return ThroughputProperties{}, fmt.Errorf("cdb: %s: an offer of version %q with neither offerThroughput nor offerAutopilotSettings", op, o.OfferVersion)
}

// offersFeedRef is the account's offers feed, signed with an empty link.
func offersFeedRef() resourceRef {
	return resourceRef{resourceType: "offers", link: "", path: "/offers"}
}

// isServerlessRefusal is a serverless account's answer to reading offers:
// 400 with "Reading or replacing offers is not supported for serverless
// accounts." Only the message tells it from another 400.
func isServerlessRefusal(err error) bool {
	var ce *CosmosError
	return errors.As(err, &ce) && ce.StatusCode == http.StatusBadRequest &&
		strings.Contains(strings.ToLower(ce.Message), "not supported for serverless accounts")
}
