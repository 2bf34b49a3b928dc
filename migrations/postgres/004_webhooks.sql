-- Messages have a lifecycle now (queued → delivered | failed), over their webhook deliveries.
ALTER TABLE messages ADD COLUMN attempts integer NOT NULL DEFAULT 0;
ALTER TABLE messages ADD COLUMN delivered_at timestamptz;
-- How many endpoints the message went to when it was sent; 0: none, so it fails (see the sweep).
ALTER TABLE messages ADD COLUMN fanout integer NOT NULL DEFAULT 0;
CREATE INDEX messages_unsubscribed ON messages (seq) WHERE status = 'queued' AND fanout = 0;

-- An account's webhook endpoints. `events`: the subscribed event types, separated by spaces.
CREATE TABLE webhook_endpoints (
  seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  id text NOT NULL UNIQUE,
  account_id bigint NOT NULL REFERENCES accounts (id),
  url text NOT NULL,
  events text NOT NULL,
  description text NOT NULL,
  secret text NOT NULL,
  -- The secret a rotation replaced: it keeps signing beside the new one until previous_secret_until.
  previous_secret text,
  previous_secret_until timestamptz,
  secret_rotated_at timestamptz,
  disabled_at timestamptz,
  disabled_reason text,
  deleted_at timestamptz,
  created_at timestamptz NOT NULL
);
CREATE INDEX webhook_endpoints_account ON webhook_endpoints (account_id, seq) WHERE deleted_at IS NULL;

-- The outbox: each event, written in the transaction of the change it reports, with its exact body.
CREATE TABLE events (
  seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  id text NOT NULL UNIQUE,
  account_id bigint NOT NULL REFERENCES accounts (id),
  type text NOT NULL,
  body text NOT NULL,
  created_at timestamptz NOT NULL
);

-- One event to one endpoint. While pending, next_attempt_at is when it is due; a claim leases it by
-- moving next_attempt_at to the lease's end and setting `lease`, so "due" also means "no live lease".
CREATE TABLE deliveries (
  seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  id text NOT NULL UNIQUE,
  event_seq bigint NOT NULL REFERENCES events (seq),
  endpoint_seq bigint NOT NULL REFERENCES webhook_endpoints (seq),
  message_seq bigint REFERENCES messages (seq),
  status text NOT NULL CHECK (status IN ('pending', 'delivered', 'failed')),
  attempts integer NOT NULL DEFAULT 0,
  next_attempt_at timestamptz,
  lease text,
  last_attempt_at timestamptz,
  last_status integer,
  last_error text,
  delivered_at timestamptz,
  created_at timestamptz NOT NULL
);
CREATE INDEX deliveries_due ON deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX deliveries_endpoint ON deliveries (endpoint_seq, seq);
CREATE INDEX deliveries_message ON deliveries (message_seq) WHERE message_seq IS NOT NULL;
