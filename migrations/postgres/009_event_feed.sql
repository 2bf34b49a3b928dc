-- The live stream reads the event log in commit order, (xid, seq), as 008 explains: every
-- account's events for each instance's feed, and one account's when a stream resumes (decision 116).
CREATE INDEX event_log_feed ON event_log (xid, seq);
CREATE INDEX event_log_account_feed ON event_log (account_id, xid, seq);
