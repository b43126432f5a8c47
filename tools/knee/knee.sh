#!/usr/bin/env bash
# knee.sh: the fan-out knee at syncd's defaults (issue "fast at the defaults").
# Starts the built syncd with its default flags on a fresh database under
# $VAR/knee, issues 1,000 device tokens, and runs syncctl bench --find-knee
# with 1,000 subscribed devices of which 100 push (batches of 10, open loop;
# 1,000 stays under syncd's default of 1,024 connections per address),
# then stops syncd. Bounded: at most 12 runs of DURATION each.
set -euo pipefail
BIN=${BIN:-bin} VAR=${VAR:-var}
DURATION=${DURATION:-10s} START_RATE=${START_RATE:-1}
dir="$VAR/knee"
rm -rf "$dir"; mkdir -p "$dir"
addr=127.0.0.1:18480
"$BIN/syncctl" token issue --tokens "$dir/tokens.json" --count 1000 --tenant knee --client-id dev \
  --read '*' --write '*' > "$dir/clients.txt"
"$BIN/syncd" --data "$dir/syncd.db" --tokens "$dir/tokens.json" --listen "$addr" --admin-listen "" >"$dir/syncd.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -fsS "http://$addr/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
"$BIN/syncctl" bench --url "http://$addr" --clients "$dir/clients.txt" --connections 1000 \
  --push-share 0.1 --subscribe-share 1 --batch 10 --find-knee --rate "$START_RATE" \
  --duration "$DURATION" --drain 30s --progress never
