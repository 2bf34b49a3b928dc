-- Messages have a lifecycle now (queued → delivered | failed), over their webhook deliveries.
ALTER TABLE messages ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE messages ADD COLUMN delivered_at TEXT;
-- How many endpoints the message went to when it was sent; 0: none, so it fails (see the sweep).
ALTER TABLE messages ADD COLUMN fanout INTEGER NOT NULL DEFAULT 0;
CREATE INDEX messages_unsubscribed ON messages (seq) WHERE status = 'queued' AND fanout = 0;

-- An account's webhook endpoints. `events`: the subscribed event types, separated by spaces.
CREATE TABLE webhook_endpoints (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  account_id INTEGER NOT NULL REFERENCES accounts (id),
  url TEXT NOT NULL,
  events TEXT NOT NULL,
  description TEXT NOT NULL,
  secret TEXT NOT NULL,
  -- The secret a rotation replaced: it keeps signing beside the new one until previous_secret_until.
  previous_secret TEXT,
  previous_secret_until TEXT,
  secret_rotated_at TEXT,
  disabled_at TEXT,
  disabled_reason TEXT,
  deleted_at TEXT,
  created_at TEXT NOT NULL
) STRICT;
CREATE INDEX webhook_endpoints_account ON webhook_endpoints (account_id, seq) WHERE deleted_at IS NULL;

-- The outbox: each event, written in the transaction of the change it reports, with its exact body.
CREATE TABLE events (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  account_id INTEGER NOT NULL REFERENCES accounts (id),
  type TEXT NOT NULL,
  body TEXT NOT NULL,
  created_at TEXT NOT NULL
) STRICT;

-- One event to one endpoint. While pending, next_attempt_at is when it is due; a claim leases it by
-- moving next_attempt_at to the lease's end and setting `lease`, so "due" also means "no live lease".
CREATE TABLE deliveries (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  event_seq INTEGER NOT NULL REFERENCES events (seq),
  endpoint_seq INTEGER NOT NULL REFERENCES webhook_endpoints (seq),
  message_seq INTEGER REFERENCES messages (seq),
  status TEXT NOT NULL CHECK (status = 'pending' OR status = 'delivered' OR status = 'failed'),
  attempts INTEGER NOT NULL DEFAULT 0,
  next_attempt_at TEXT,
  lease TEXT,
  last_attempt_at TEXT,
  last_status INTEGER,
  last_error TEXT,
  delivered_at TEXT,
  created_at TEXT NOT NULL
) STRICT;
CREATE INDEX deliveries_due ON deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX deliveries_endpoint ON deliveries (endpoint_seq, seq);
CREATE INDEX deliveries_message ON deliveries (message_seq) WHERE message_seq IS NOT NULL;
