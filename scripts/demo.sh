#!/usr/bin/env bash
# A first look at walshm: a fresh data directory, 4 backends inserting WAL
# for 3 seconds, then the WAL read back by walshm's reader and by
# PostgreSQL's pg_waldump when it is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --bins
dir=$(mktemp -d /tmp/walshm-demo.XXXXXX)
trap 'rm -rf "$dir"' EXIT
./target/release/postmaster init -D "$dir/data"
./target/release/postmaster start -D "$dir/data" --set fsync=off --workers 4 --workload emit:100 &
pm=$!
sleep 3
kill -TERM "$pm"
wait "$pm"
./target/release/postmaster waldump -D "$dir/data" --quiet --stats
waldump=$(command -v pg_waldump || echo /usr/lib/postgresql/15/bin/pg_waldump)
if [ -x "$waldump" ]; then
  echo "--- PostgreSQL's pg_waldump on the same WAL:"
  "$waldump" -p "$dir/data/pg_wal" -s 0/01000028 --stats 2>&1 | grep -E 'LogicalMessage|^Total|error' || true
fi
