-- The event log (decision 113): every event of an account, whether or not an endpoint is
-- subscribed to it, written by the transaction of the change it reports, kept EVENT_RETENTION_DAYS.
-- `id` is the `webhook-id` of its deliveries (the outbox row in `events` has the same id). `data` is
-- the resource as the API returned it.
--
-- `seq` order is not commit order here: a transaction may take a lower seq and commit after
-- another has been read. Each row keeps its transaction id (`xid`), so that a reader of "the
-- account's events after X" can follow (xid, seq) order, reading only transactions below the
-- xmin of its snapshot: every one of those has ended, and any later row has a higher xid, so none
-- appears behind what was read (decision 113).
CREATE TABLE event_log (
  seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
  id text NOT NULL UNIQUE,
  account_id bigint NOT NULL REFERENCES accounts (id),
  type text NOT NULL,
  data text NOT NULL,
  created_at timestamptz NOT NULL
);
CREATE INDEX event_log_account ON event_log (account_id, seq);
-- The housekeeping sweep deletes by age.
CREATE INDEX event_log_created ON event_log (created_at);

-- An endpoint's failed deliveries, oldest first: what a recovery sends again.
CREATE INDEX deliveries_failed ON deliveries (endpoint_seq, seq) WHERE status = 'failed';
