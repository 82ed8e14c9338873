-- The new boot of instance ?1 (decided by idemgate_core::machine::register): boot ?2, started at
-- ?3, alive until ?4, on host ?5 as pid ?6, the process ?7.
INSERT INTO instances (instance, boot, started_at, alive_until, host, pid, process)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
ON CONFLICT (instance) DO UPDATE SET
    boot        = excluded.boot,
    started_at  = excluded.started_at,
    alive_until = excluded.alive_until,
    host        = excluded.host,
    pid         = excluded.pid,
    process     = excluded.process
