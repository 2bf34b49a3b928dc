-- The pet change feed (decision 98): every change to a pet, in commit order, written by the same
-- transaction as the change (a trigger, so no write path can skip it). Each process's pet cache
-- reads the rows after the last it saw and forgets those pets; `old_status`/`new_status` tell it
-- which filtered pages could hold them. Pruned to the newest rows by the cache's sweep.
CREATE TABLE pet_changes (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  pet_id INTEGER NOT NULL,
  old_status TEXT,
  new_status TEXT
) STRICT;

CREATE TRIGGER pets_inserted AFTER INSERT ON pets BEGIN
  INSERT INTO pet_changes (pet_id, old_status, new_status) VALUES (NEW.id, NULL, NEW.status);
END;
CREATE TRIGGER pets_updated AFTER UPDATE ON pets BEGIN
  INSERT INTO pet_changes (pet_id, old_status, new_status) VALUES (NEW.id, OLD.status, NEW.status);
END;
CREATE TRIGGER pets_deleted AFTER DELETE ON pets BEGIN
  INSERT INTO pet_changes (pet_id, old_status, new_status) VALUES (OLD.id, OLD.status, NULL);
END;
