-- Portal sign-in: accounts made by the CLI have no password until one is set.
ALTER TABLE accounts ADD COLUMN password_hash TEXT;

-- Portal sessions, stored under the SHA-256 of their cookie token.
CREATE TABLE sessions (
  id TEXT PRIMARY KEY,
  account_id INTEGER NOT NULL REFERENCES accounts (id),
  created_at TEXT NOT NULL,
  expires_at TEXT NOT NULL
) STRICT;
CREATE INDEX sessions_expires ON sessions (expires_at);

-- Idempotency-Key records, per API key; the response is stored with the write it belongs to.
CREATE TABLE idempotency_keys (
  scope TEXT NOT NULL,
  key TEXT NOT NULL,
  fingerprint TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('in_progress', 'done')),
  response_status INTEGER,
  response_body TEXT,
  created_at TEXT NOT NULL,
  expires_at TEXT NOT NULL,
  PRIMARY KEY (scope, key)
) STRICT;
CREATE INDEX idempotency_keys_expires ON idempotency_keys (expires_at);
