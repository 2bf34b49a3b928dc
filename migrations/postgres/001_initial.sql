-- Pets: the catalogue, shared by all accounts. Ids stay within JSON's exact integers (2^53 - 1).
CREATE TABLE pets (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY CHECK (id BETWEEN 1 AND 9007199254740991),
  name text NOT NULL,
  category_id bigint NOT NULL CHECK (category_id BETWEEN 1 AND 9007199254740991),
  status text NOT NULL CHECK (status IN ('available', 'pending', 'sold'))
);
-- Serves both the status filter and the keyset walk (status = $1 AND id > $2 ORDER BY id).
CREATE INDEX pets_status_id ON pets (status, id);

CREATE TABLE accounts (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  email text NOT NULL UNIQUE,
  created_at timestamptz NOT NULL
);

-- Only the SHA-256 of each key is kept; `prefix` identifies a key to its owner.
CREATE TABLE api_keys (
  id text PRIMARY KEY,
  account_id bigint NOT NULL REFERENCES accounts (id),
  name text NOT NULL,
  prefix text NOT NULL,
  key_hash text NOT NULL UNIQUE,
  created_at timestamptz NOT NULL,
  expires_at timestamptz,
  revoked_at timestamptz,
  last_used_at timestamptz
);
CREATE INDEX api_keys_account ON api_keys (account_id, created_at);

CREATE TABLE messages (
  seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  id text NOT NULL UNIQUE,
  account_id bigint NOT NULL REFERENCES accounts (id),
  body text NOT NULL,
  status text NOT NULL,
  created_at timestamptz NOT NULL
);
CREATE INDEX messages_account_seq ON messages (account_id, seq);

-- Secrets shared by every instance on this database (e.g. the pagination cursor signing key).
CREATE TABLE secrets (
  name text PRIMARY KEY,
  value text NOT NULL
);
