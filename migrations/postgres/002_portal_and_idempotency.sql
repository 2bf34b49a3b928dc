-- Portal sign-in: accounts made by the CLI have no password until one is set.
ALTER TABLE accounts ADD COLUMN password_hash text;

-- Portal sessions, stored under the SHA-256 of their cookie token.
CREATE TABLE sessions (
  id text PRIMARY KEY,
  account_id bigint NOT NULL REFERENCES accounts (id),
  created_at timestamptz NOT NULL,
  expires_at timestamptz NOT NULL
);
CREATE INDEX sessions_expires ON sessions (expires_at);

-- Idempotency-Key records, per API key; the response is stored with the write it belongs to.
CREATE TABLE idempotency_keys (
  scope text NOT NULL,
  key text NOT NULL,
  fingerprint text NOT NULL,
  state text NOT NULL CHECK (state IN ('in_progress', 'done')),
  response_status integer,
  response_body text,
  created_at timestamptz NOT NULL,
  expires_at timestamptz NOT NULL,
  PRIMARY KEY (scope, key)
);
CREATE INDEX idempotency_keys_expires ON idempotency_keys (expires_at);
