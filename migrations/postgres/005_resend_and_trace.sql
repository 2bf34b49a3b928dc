-- A delivery sent again by hand starts the retry schedule over: its attempts up to then.
ALTER TABLE deliveries ADD COLUMN retry_base integer NOT NULL DEFAULT 0;
-- The W3C traceparent of the request that made the event (tracing on), so that its deliveries
-- continue that trace.
ALTER TABLE events ADD COLUMN traceparent text;
