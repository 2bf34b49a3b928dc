-- Pets change now (updatePet, orders): a version per pet, moved by every change, is its ETag.
ALTER TABLE pets ADD COLUMN version bigint NOT NULL DEFAULT 1;

-- Orders: one account's reservation of one pet. `seq` orders them (newest first) for keyset pages.
CREATE TABLE orders (
  seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  id text NOT NULL UNIQUE,
  account_id bigint NOT NULL REFERENCES accounts (id),
  pet_id bigint NOT NULL REFERENCES pets (id),
  status text NOT NULL CHECK (status IN ('placed', 'completed', 'canceled', 'expired')),
  created_at timestamptz NOT NULL,
  expires_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL
);
-- At most one placed order per pet, whatever any instance does.
CREATE UNIQUE INDEX orders_one_placed_per_pet ON orders (pet_id) WHERE status = 'placed';
CREATE INDEX orders_account_seq ON orders (account_id, seq);
-- The expiry sweep reads only placed orders, oldest hold first.
CREATE INDEX orders_placed_expiry ON orders (expires_at) WHERE status = 'placed';

-- What a key may do: space-separated scopes; NULL (keys made before scopes) is every scope.
ALTER TABLE api_keys ADD COLUMN scopes text;
