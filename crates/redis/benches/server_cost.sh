#!/usr/bin/env bash
# Server-side cost of the store-mode claim beside a raw SET NX PX and a one-line SET NX PX script,
# measured with redis-benchmark (a C client, so the client's own cost stays small) against a
# private redis-server this script starts on a free loopback port and stops. Prints, per path,
# requests/s and the server's microseconds per call (INFO commandstats), then the claim's time
# over the one-line script's.
#
# The claim is sent as the store sends it: FCALL of the function library src/store/script.rs
# builds from src/lua/ (same text, same name), with a claim's arguments for a new event (so
# every call is a first claim, the commonest). BEFORE=<git revision> also measures the claim
# script of that revision (EVALSHA of its common.lua and claim.lua, as the store sent it then).
#
#   bash crates/redis/benches/server_cost.sh            # 200000 requests, 16 clients
#   REQUESTS=1000000 CLIENTS=64 bash crates/redis/benches/server_cost.sh
#   BEFORE=98e4b9a bash crates/redis/benches/server_cost.sh
set -euo pipefail
cd "$(dirname "$0")/../src/lua"
REQUESTS=${REQUESTS:-200000}
CLIENTS=${CLIENTS:-16}
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
DIR=$(mktemp -d)
redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
  --dir "$DIR" --logfile "$DIR/log" --pidfile "$DIR/pid"
trap 'redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$DIR"' EXIT
for _ in $(seq 50); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
cli() { redis-cli -p "$PORT" "$@"; }

# The library, as Scripts::new (src/store/script.rs) builds it: its hash covers the text with
# @HASH@ where the hash goes.
{ printf '#!lua name=idemgate_@HASH@\nlocal function register(name, f, flags)\n  redis.register_function{function_name = %s, callback = f, flags = flags or {}}\nend\n' \
    "'idemgate_@HASH@_' .. name"; cat common.lua; printf '\n'
  for op in claim finish lookup renew abandon boot; do cat "$op.lua"; printf '\n'; done; } >"$DIR/template.lua"
HASH=$(sha1sum "$DIR/template.lua" | cut -c1-16)
sed "s/@HASH@/$HASH/g" "$DIR/template.lua" >"$DIR/library.lua"
cli FUNCTION LOAD REPLACE "$(cat "$DIR/library.lua")" >/dev/null
CLAIM=idemgate_${HASH}_claim
# The claim's fallback script (EVALSHA), as operation scripts are built there too.
{ printf 'local run\nlocal function register(_, f)\n  run = f\nend\n'; cat common.lua; printf '\n'; cat claim.lua; printf '\nreturn run(KEYS, ARGV)\n'; } >"$DIR/claim_script.lua"
SCRIPT=$(cli SCRIPT LOAD "$(cat "$DIR/claim_script.lua")")
ONE=$(cli SCRIPT LOAD "return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])")
if [ -n "${BEFORE:-}" ]; then
  OLD=$(cli SCRIPT LOAD "$(git show "$BEFORE:./common.lua")
$(git show "$BEFORE:./claim.lua")")
fi

FP=$(printf 'ab%.0s' $(seq 32))
# ARGV of a claim: retention, rows kept, stream MAXLEN, event id, mode, fingerprint, lease, ttl,
# nonce, late duplicates, holder instance, holder boot (src/lua/claim.lua).
ARGS=(604800000 256 0 "" s "$FP" 60000 600000 00000000deadbeef flag "" "")
STREAM_ARGS=(604800000 256 100000 "evt___rand_int__" s "$FP" 60000 600000 00000000deadbeef flag "" "")
HELD_ARGS=(604800000 256 0 "" s "$FP" 60000 600000 00000000deadbeef flag gw-1 3)

declare -A USEC
run() { # name, command counted in commandstats, command...
  local name=$1 counted=$2
  shift 2
  cli FLUSHALL >/dev/null
  cli CONFIG RESETSTAT >/dev/null
  local rps
  rps=$(redis-benchmark -p "$PORT" -q -n "$REQUESTS" -c "$CLIENTS" -r 1000000000 "$@" 2>&1 |
    tr '\r' '\n' | grep 'requests per second' | tail -1 | sed 's/.*: \([0-9.]*\) requests.*/\1/')
  local usec
  usec=$(cli INFO commandstats | grep "^cmdstat_$counted:" | sed 's/.*usec_per_call=\([0-9.]*\).*/\1/')
  USEC[$name]=$usec
  printf '| %s | %.0f | %s |\n' "$name" "$rps" "$usec"
}
ratio() { python3 -c "print('%.2f' % (${USEC[$1]} / ${USEC[$2]}))"; }

echo "| path ($CLIENTS clients) | requests/s | server µs per call |"
echo "|---|---|---|"
run "raw SET NX PX" set SET "k:__rand_int__" v NX PX 600000
run "EVALSHA of a one-line SET NX PX script" evalsha EVALSHA "$ONE" 1 "k:__rand_int__" v 600000
run "claim (FCALL), no source stream" fcall FCALL "$CLAIM" 1 "{b/__rand_int__}:e" "${ARGS[@]}"
run "claim (FCALL), with a holder" fcall FCALL "$CLAIM" 1 "{b/__rand_int__}:e" "${HELD_ARGS[@]}"
run "claim (FCALL), writes the source stream" fcall FCALL "$CLAIM" 2 "{b/__rand_int__}:e" \
  "{b}:s" "${STREAM_ARGS[@]}"
run "claim as a script (EVALSHA, no Functions), no source stream" evalsha EVALSHA "$SCRIPT" 1 \
  "{b/__rand_int__}:e" "${ARGS[@]}"
if [ -n "${BEFORE:-}" ]; then
  run "claim script of $BEFORE (EVALSHA), no source stream" evalsha EVALSHA "$OLD" 1 \
    "{b/__rand_int__}:e" "${ARGS[@]}"
fi
echo
echo "claim (FCALL, no source stream) / one-line script: $(ratio "claim (FCALL), no source stream" "EVALSHA of a one-line SET NX PX script")"
echo "claim (FCALL, writes the source stream) / one-line script: $(ratio "claim (FCALL), writes the source stream" "EVALSHA of a one-line SET NX PX script")"
