-- idemgate SQLite schema, version 7: an event's queue items by key, for `idemgate lookup`, the
-- event's page and `replay --event-id`. One more index entry per queued delivery.
CREATE INDEX inbox_by_key ON inbox_items (source, event_id);
