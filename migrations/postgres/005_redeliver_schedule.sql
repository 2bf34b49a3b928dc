-- A delivery sent again by hand starts the retry schedule over: its attempts up to then.
ALTER TABLE deliveries ADD COLUMN retry_base integer NOT NULL DEFAULT 0;
