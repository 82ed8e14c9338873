INSERT INTO history (source, event_id, outcome, processed, attempt, received_at, gap_ms, fingerprint,
                     note)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
