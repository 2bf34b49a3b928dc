-- Pets: the catalogue, shared by all accounts. Ids stay within JSON's exact integers (2^53 - 1).
CREATE TABLE pets (
  id INTEGER PRIMARY KEY AUTOINCREMENT CHECK (id BETWEEN 1 AND 9007199254740991),
  name TEXT NOT NULL,
  category_id INTEGER NOT NULL CHECK (category_id BETWEEN 1 AND 9007199254740991),
  status TEXT NOT NULL CHECK (status IN ('available', 'pending', 'sold'))
) STRICT;
-- Serves both the status filter and the keyset walk (status = ? AND id > ? ORDER BY id).
CREATE INDEX pets_status_id ON pets (status, id);

CREATE TABLE accounts (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  email TEXT NOT NULL UNIQUE,
  created_at TEXT NOT NULL
) STRICT;

-- Only the SHA-256 of each key is kept; `prefix` identifies a key to its owner.
CREATE TABLE api_keys (
  id TEXT PRIMARY KEY,
  account_id INTEGER NOT NULL REFERENCES accounts (id),
  name TEXT NOT NULL,
  prefix TEXT NOT NULL,
  key_hash TEXT NOT NULL UNIQUE,
  created_at TEXT NOT NULL,
  expires_at TEXT,
  revoked_at TEXT,
  last_used_at TEXT
) STRICT;
CREATE INDEX api_keys_account ON api_keys (account_id, created_at);

CREATE TABLE messages (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  account_id INTEGER NOT NULL REFERENCES accounts (id),
  body TEXT NOT NULL,
  status TEXT NOT NULL,
  created_at TEXT NOT NULL
) STRICT;
CREATE INDEX messages_account_seq ON messages (account_id, seq);

-- Secrets shared by every instance on this database (e.g. the pagination cursor signing key).
CREATE TABLE secrets (
  name TEXT PRIMARY KEY,
  value TEXT NOT NULL
) STRICT;
