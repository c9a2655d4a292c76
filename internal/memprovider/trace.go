package memprovider

import "github.com/duroxide-go/cdb"

var _ cdb.TraceCarrier = (*Provider)(nil)

// CarriesTraceContext is cdb.TraceCarrier: a start's and an activity's
// trace context ride in their queue rows beside the JSON, and the start's
// in the instance row its first turn creates.
func (p *Provider) CarriesTraceContext() {}
