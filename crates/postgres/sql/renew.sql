-- renew(token, lease): the new lease_until in epoch ms, or NULL when the token is stale.
SELECT renew_claim($1::text, $2::text, $3::integer, $4::bigint, $5::bigint) AS lease_until_ms
