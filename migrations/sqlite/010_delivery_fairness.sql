-- Deliveries are claimed endpoint by endpoint, a few at a time each (decision 122), so that one
-- endpoint's backlog does not hold up another's: each endpoint's due deliveries, oldest first,
-- and its leases in flight, which are few (bounded by the claims), whatever its backlog.
CREATE INDEX deliveries_endpoint_due ON deliveries (endpoint_seq, next_attempt_at) WHERE status = 'pending';
CREATE INDEX deliveries_leased ON deliveries (endpoint_seq) WHERE status = 'pending' AND lease IS NOT NULL;
