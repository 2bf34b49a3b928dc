-- The pets table again, with its status rule written as comparisons. SQLite evaluates
-- `status IN ('available', 'pending', 'sold')` by building a temporary index of the three values on
-- every insert, which cost more than the insert itself (a list of two or fewer is compared
-- directly). Same rule, same rows, same ids.
CREATE TABLE pets_new (
  id INTEGER PRIMARY KEY AUTOINCREMENT CHECK (id BETWEEN 1 AND 9007199254740991),
  name TEXT NOT NULL,
  category_id INTEGER NOT NULL CHECK (category_id BETWEEN 1 AND 9007199254740991),
  status TEXT NOT NULL CHECK (status = 'available' OR status = 'pending' OR status = 'sold')
) STRICT;
INSERT INTO pets_new (id, name, category_id, status) SELECT id, name, category_id, status FROM pets ORDER BY id;
-- The highest id ever given goes with the table (AUTOINCREMENT never gives it again); renaming
-- the table renames its sqlite_sequence row, dropping the old one deletes the old row.
DELETE FROM sqlite_sequence WHERE name = 'pets_new';
INSERT INTO sqlite_sequence (name, seq) SELECT 'pets_new', seq FROM sqlite_sequence WHERE name = 'pets';
DROP TABLE pets;
ALTER TABLE pets_new RENAME TO pets;
-- Serves both the status filter and the keyset walk (status = ? AND id > ? ORDER BY id).
CREATE INDEX pets_status_id ON pets (status, id);
