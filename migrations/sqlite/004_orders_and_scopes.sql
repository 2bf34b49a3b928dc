-- Pets change now (updatePet, orders): a version per pet, moved by every change, is its ETag.
ALTER TABLE pets ADD COLUMN version INTEGER NOT NULL DEFAULT 1;

-- Orders: one account's reservation of one pet. `seq` orders them (newest first) for keyset pages.
CREATE TABLE orders (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  account_id INTEGER NOT NULL REFERENCES accounts (id),
  pet_id INTEGER NOT NULL REFERENCES pets (id),
  status TEXT NOT NULL CHECK (status = 'placed' OR status = 'completed' OR status = 'canceled' OR status = 'expired'),
  created_at TEXT NOT NULL,
  expires_at TEXT NOT NULL,
  updated_at TEXT NOT NULL
) STRICT;
-- At most one placed order per pet, whatever any process does.
CREATE UNIQUE INDEX orders_one_placed_per_pet ON orders (pet_id) WHERE status = 'placed';
CREATE INDEX orders_account_seq ON orders (account_id, seq);
-- The expiry sweep reads only placed orders, oldest hold first.
CREATE INDEX orders_placed_expiry ON orders (expires_at) WHERE status = 'placed';

-- What a key may do: space-separated scopes; NULL (keys made before scopes) is every scope.
ALTER TABLE api_keys ADD COLUMN scopes TEXT;
