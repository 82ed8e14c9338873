-- idemgate SQLite schema, version 6: each boot's liveness lease.
--
-- A boot holds its instance name while its lease runs (renewed by its heartbeat, ended when it
-- stops), with where it runs, so a second process under a live name is refused, told which
-- process holds it, and frees nothing. A boot registered before this version has no lease and
-- is taken for dead, as every earlier boot was.
ALTER TABLE instances ADD COLUMN alive_until INTEGER;
ALTER TABLE instances ADD COLUMN host TEXT NOT NULL DEFAULT '';
ALTER TABLE instances ADD COLUMN pid INTEGER NOT NULL DEFAULT 0;
-- Who the process is, for a later process on the same machine to tell whether it still runs.
ALTER TABLE instances ADD COLUMN process TEXT NOT NULL DEFAULT '';
