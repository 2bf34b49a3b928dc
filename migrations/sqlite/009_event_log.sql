-- The event log (decision 113): every event of an account, whether or not an endpoint is
-- subscribed to it, written by the transaction of the change it reports, kept EVENT_RETENTION_DAYS.
-- `id` is the `webhook-id` of its deliveries (the outbox row in `events` has the same id). `data` is
-- the resource as the API returned it. Commits are serial here, so `seq` is commit order: what a
-- reader of "the account's events after X" follows.
CREATE TABLE event_log (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  account_id INTEGER NOT NULL REFERENCES accounts (id),
  type TEXT NOT NULL,
  data TEXT NOT NULL,
  created_at TEXT NOT NULL
) STRICT;
CREATE INDEX event_log_account ON event_log (account_id, seq);
-- The housekeeping sweep deletes by age.
CREATE INDEX event_log_created ON event_log (created_at);

-- An endpoint's failed deliveries, oldest first: what a recovery sends again.
CREATE INDEX deliveries_failed ON deliveries (endpoint_seq, seq) WHERE status = 'failed';
