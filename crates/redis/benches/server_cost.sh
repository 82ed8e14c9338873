#!/usr/bin/env bash
# Server-side cost of the store-mode claim script beside a raw SET NX PX, measured with
# redis-benchmark (a C client, so the client's own cost stays small) against a private
# redis-server this script starts on a free loopback port and stops. Prints, per path,
# requests/s and the server's microseconds per call (INFO commandstats).
#
#   bash crates/redis/benches/server_cost.sh            # 200000 requests, 16 clients
#   REQUESTS=1000000 CLIENTS=64 bash crates/redis/benches/server_cost.sh
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
FP=$(printf 'ab%.0s' $(seq 32))
CLAIM=$(cli SCRIPT LOAD "$(cat common.lua claim.lua)")
ONE=$(cli SCRIPT LOAD "return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])")

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
  printf '| %s | %.0f | %s |\n' "$name" "$rps" "$usec"
}

echo "| path ($CLIENTS clients) | requests/s | server µs per call |"
echo "|---|---|---|"
run "raw SET NX PX" set SET "k:__rand_int__" v NX PX 600000
run "EVALSHA of a one-line SET NX PX script" evalsha EVALSHA "$ONE" 1 "k:__rand_int__" v 600000
run "claim script, no source stream" evalsha EVALSHA "$CLAIM" 1 "{b/__rand_int__}:e" \
  604800000 256 0 "" s "$FP" 60000 600000 00000000deadbeef flag
run "claim script, writes the source stream" evalsha EVALSHA "$CLAIM" 2 "{b/__rand_int__}:e" \
  "{b}:s" 604800000 256 100000 "evt___rand_int__" s "$FP" 60000 600000 00000000deadbeef flag
