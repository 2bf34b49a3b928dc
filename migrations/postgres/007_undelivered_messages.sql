-- A message that no endpoint was subscribed to is `undelivered`, no longer `failed` (decision 104):
-- so are those the sweep marked before. fanout = 0: it made no delivery, so no attempt of it failed.
UPDATE messages SET status = 'undelivered' WHERE status = 'failed' AND fanout = 0;
