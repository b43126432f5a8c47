#!/usr/bin/env bash
# profile.sh: CPU profiles of syncd and of the generator at one open-loop
# rate of the knee's scenario (1,000 subscribed devices, 100 pushers of
# batches of 10), for docs/benchmarks.md's "Where one delivery's CPU goes".
# Starts the built syncd at its default flags (plus an admin listener on
# loopback for /debug/pprof) on a fresh database under $VAR/knee-profile,
# runs syncctl bench --rate RATE for DURATION with --cpuprofile, takes
# syncd's profile over the middle of the run (PROFILE_SECONDS), and reads
# syncd's RSS from /proc while loaded. Writes syncd.pprof and bench.pprof
# there and prints the bench report and each profile's top. Bounded: one
# run of DURATION plus the drain.
set -euo pipefail
BIN=${BIN:-bin} VAR=${VAR:-var}
RATE=${RATE:-0.1} DURATION=${DURATION:-30s} PROFILE_SECONDS=${PROFILE_SECONDS:-15}
dir="$VAR/knee-profile"
rm -rf "$dir"; mkdir -p "$dir"
addr=127.0.0.1:18482 admin=127.0.0.1:18483
"$BIN/syncctl" token issue --tokens "$dir/tokens.json" --count 1000 --tenant knee --client-id dev \
  --read '*' --write '*' > "$dir/clients.txt"
adm=$("$BIN/syncctl" token issue --tokens "$dir/tokens.json" --admin)
"$BIN/syncd" --data "$dir/syncd.db" --tokens "$dir/tokens.json" --listen "$addr" --admin-listen "$admin" >"$dir/syncd.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -fsS "http://$addr/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
cpu0=$(awk '{print $14+$15}' "/proc/$pid/stat")
/usr/bin/time -f "generator CPU %U s user + %S s system" -o "$dir/bench-cpu.txt" \
  "$BIN/syncctl" bench --url "http://$addr" --clients "$dir/clients.txt" --connections 1000 \
  --push-share 0.1 --subscribe-share 1 --batch 10 --rate "$RATE" \
  --duration "$DURATION" --drain 30s --progress never --cpuprofile "$dir/bench.pprof" > "$dir/bench.txt" &
bench=$!
# Connecting 1,000 devices takes a few seconds; profile the middle of the run.
half=$(( ${DURATION%s} / 2 - PROFILE_SECONDS / 2 + 5 ))
sleep "$half"
grep -E 'VmRSS|VmHWM' "/proc/$pid/status" > "$dir/rss.txt"
curl -fsS -H "Authorization: Bearer $adm" -o "$dir/syncd.pprof" \
  "http://$admin/debug/pprof/profile?seconds=$PROFILE_SECONDS"
grep -E 'VmRSS|VmHWM' "/proc/$pid/status" >> "$dir/rss.txt"
wait "$bench"
# CPU of the whole run (connects included), to divide by its deliveries.
echo "syncd CPU $(awk -v c0="$cpu0" -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($14+$15-c0)/hz}' "/proc/$pid/stat") s" >> "$dir/bench-cpu.txt"
# The ack's split, as means over the run: waiting for the committer
# (syncd_commit_wait_seconds), arrival to commit (syncd_apply_duration_seconds)
# and arrival to the answer written (syncd_push_answer_seconds, where the
# build has it).
curl -fsS "http://$addr/metrics" | awk '
  /^syncd_(commit_wait|apply_duration|push_answer)_seconds(_sum|_count)/ {
    name=$1; sub(/\{.*\}/, "", name); v[name]+=$2 }
  END { for (m in v) if (m ~ /_sum$/) { b=m; sub(/_sum$/, "", b)
    if (v[b "_count"] > 0) printf "%-40s mean %.1f ms over %d\n", b, 1000*v[m]/v[b "_count"], v[b "_count"] } }' > "$dir/split.txt"
cat "$dir/bench.txt" "$dir/rss.txt" "$dir/split.txt" "$dir/bench-cpu.txt"
echo "== load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== syncd"; go tool pprof -top -nodecount 35 "$BIN/syncd" "$dir/syncd.pprof" 2>/dev/null | head -45
echo "== generator"; go tool pprof -top -nodecount 25 "$BIN/syncctl" "$dir/bench.pprof" 2>/dev/null | head -35
