SELECT complete_claim($1::text, $2::text, $3::integer, $4::bigint) AS held
