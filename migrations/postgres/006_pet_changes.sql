-- The pet change feed (decision 98): every change to a pet, written by the same transaction as the
-- change (a trigger, so no write path can skip it). Sequence order is not commit order here, so
-- each row keeps its transaction id, and a reader keeps the snapshot of its last read: the rows to
-- read next are those of transactions that snapshot did not see. `old_status`/`new_status` tell
-- the cache which filtered pages could hold the pet.
CREATE TABLE pet_changes (
  seq bigserial PRIMARY KEY,
  xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
  pet_id bigint NOT NULL,
  old_status text,
  new_status text,
  changed_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
-- The only index besides the key: every pet write maintains it. Pruning scans the table, which
-- holds minutes of changes.
CREATE INDEX pet_changes_xid ON pet_changes (xid);
-- The newest transaction whose rows were pruned: a reader whose last snapshot had not seen it
-- would miss them, so it forgets everything instead.
CREATE TABLE pet_changes_pruned (
  one boolean PRIMARY KEY DEFAULT true CHECK (one),
  xid xid8 NOT NULL
);
INSERT INTO pet_changes_pruned (xid) VALUES ('0');

-- The table of the schema the migration ran in, named in the function's text, whatever the
-- search_path of the session that changes a pet (a SET on the function would cost every write).
DO $migration$
BEGIN
  EXECUTE format($function$
    CREATE FUNCTION pet_changed() RETURNS trigger LANGUAGE plpgsql AS $body$
    BEGIN
      IF TG_OP = 'DELETE' THEN
        INSERT INTO %1$I.pet_changes (pet_id, old_status, new_status) VALUES (OLD.id, OLD.status, NULL);
      ELSIF TG_OP = 'UPDATE' THEN
        INSERT INTO %1$I.pet_changes (pet_id, old_status, new_status) VALUES (NEW.id, OLD.status, NEW.status);
      ELSE
        INSERT INTO %1$I.pet_changes (pet_id, old_status, new_status) VALUES (NEW.id, NULL, NEW.status);
      END IF;
      RETURN NULL;
    END
    $body$
  $function$, current_schema());
END
$migration$;
CREATE TRIGGER pets_changed AFTER INSERT OR UPDATE OR DELETE ON pets
  FOR EACH ROW EXECUTE FUNCTION pet_changed();
