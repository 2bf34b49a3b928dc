-- A delivery sent again by hand starts the retry schedule over: its attempts up to then.
ALTER TABLE deliveries ADD COLUMN retry_base INTEGER NOT NULL DEFAULT 0;
