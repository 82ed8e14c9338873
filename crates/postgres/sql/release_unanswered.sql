-- Claims whose batch was sent but never answered ($1 sources, $2 event ids, $3 the nonces their
-- records would carry): each record still holding its nonce, and not completed, goes, with a
-- 'released' history row. How many.
SELECT release_unanswered($1::text[], $2::text[], $3::bigint[]) AS released
