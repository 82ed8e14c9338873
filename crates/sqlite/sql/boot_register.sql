-- A new boot of instance ?1, started at ?2: the first is 1, each later one the last + 1.
INSERT INTO instances (instance, boot, started_at) VALUES (?1, 1, ?2)
ON CONFLICT (instance) DO UPDATE SET boot = boot + 1, started_at = excluded.started_at
RETURNING boot
