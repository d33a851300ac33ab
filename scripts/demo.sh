#!/usr/bin/env bash
# A first look at walshm: a fresh data directory, 4 backends inserting WAL
# for 3 seconds, then the WAL read back by walshm's reader and by
# PostgreSQL's pg_waldump when it is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --bins
dir=$(mktemp -d /tmp/walshm-demo.XXXXXX)
trap 'rm -rf "$dir"' EXIT
# wal_keep_size: keep every segment, so that both readers can read it all.
./target/release/postmaster init -D "$dir/data" --set wal_keep_size=100GB
./target/release/postmaster start -D "$dir/data" --set fsync=off --workers 4 --workload emit:100 &
pm=$!
sleep 3
kill -TERM "$pm"
wait "$pm"
./target/release/postmaster waldump -D "$dir/data" --quiet --stats | tee "$dir/waldump.txt"
waldump=$(command -v pg_waldump || echo /usr/lib/postgresql/15/bin/pg_waldump)
if [ -x "$waldump" ]; then
  echo "--- PostgreSQL's pg_waldump on the same WAL:"
  first=$(sed -n 's/.* from \([0-9A-F]*\/[0-9A-F]*\)$/\1/p' "$dir/waldump.txt")
  # pg_waldump ends with "invalid record length ... got 0" at the end of WAL.
  "$waldump" -p "$dir/data/pg_wal" -s "$first" --stats 2>&1 | grep -E 'LogicalMessage|^Total|error' || true
  echo "(pg_waldump reports the end of WAL as 'invalid record length at X: wanted 24, got 0')"
fi
