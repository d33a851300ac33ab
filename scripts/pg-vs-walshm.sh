#!/usr/bin/env bash
#! pg-vs-walshm.sh: runs identical pgbench commands against a temporary
#! PostgreSQL 15 cluster and a temporary walshm server on this machine and
#! prints their throughput side by side.
#!
#! Scripts (pgbench -n -M prepared -f): a non-transactional 16-byte
#! pg_logical_emit_message, txid_current(), and a transactional block
#! (BEGIN; 64-byte message; COMMIT). Durability "on" (fsync=on,
#! synchronous_commit=on) and "off" (both off), on both servers alike.
#! Both servers listen on a Unix socket only (no network needed); PostgreSQL
#! runs as the `postgres` system user when this runs as root. Both are
#! stopped and their directories removed on exit (trap), whatever happens.
#!
#! Usage: scripts/pg-vs-walshm.sh [--seconds S] [--clients "1 2 4"] [--quick]
#!   --seconds S   pgbench -T per point (default 5)
#!   --clients L   client counts (default "1 2 4 16 64 256")
#!   --quick       fewer points: clients "1 16 256"
#! Environment: PG_BINDIR (default /usr/lib/postgresql/15/bin), WALSHM_BIN
#! (default target/release/postmaster, built with cargo if missing).
set -euo pipefail

SECONDS_PER_POINT=5
CLIENTS="1 2 4 16 64 256"
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) SECONDS_PER_POINT="$2"; shift 2 ;;
        --clients) CLIENTS="$2"; shift 2 ;;
        --quick) CLIENTS="1 16 256"; shift ;;
        -h|--help) sed -n 's/^#! \{0,1\}//p' "$0"; exit 0 ;;
        *) echo "unknown option: $1" >&2; exit 2 ;;
    esac
done

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=scripts/lib-servers.sh
. "$ROOT/scripts/lib-servers.sh"
need_pg_tools initdb postgres pgbench pg_isready
find_walshm

MAX_CLIENTS=0
for c in $CLIENTS; do [ "$c" -gt "$MAX_CLIENTS" ] && MAX_CLIENTS=$c; done
MAX_CONN=$(( MAX_CLIENTS + 44 ))
[ "$MAX_CONN" -lt 300 ] && MAX_CONN=300

WORK="$(mktemp -d /tmp/pg-vs-walshm.XXXXXX)"
chmod 755 "$WORK"
PG_PID=""
PG_LAUNCHER=""
W_PID=""
PG_STOP_QUIT=1

pg_user
trap_cleanup
pick_ports

# --- PostgreSQL cluster
PGDATA="$WORK/pgdata"
PGSOCK="$WORK/pgsock"
init_pg

start_pg() { # fsync synchronous_commit
    [ -e "$PGDATA/postmaster.pid" ] && { echo "error: a PostgreSQL server still runs on $PGDATA" >&2; exit 1; }
    launch_pg -c fsync="$1" -c synchronous_commit="$2"
}

# --- walshm server
WDATA="$WORK/walshm"
init_walshm

walshm_ready() { grep -q "ready to accept connections" "$WORK/walshm.log"; }
start_walshm() { # fsync synchronous_commit
    launch_walshm walshm_ready --set fsync="$1" --set synchronous_commit="$2"
}

# --- pgbench scripts
printf '%s\n' "SELECT pg_logical_emit_message(false, 'test', repeat('x', 16));" >"$WORK/emit16.sql"
printf '%s\n' "SELECT txid_current();" >"$WORK/txid.sql"
printf '%s\n' "BEGIN;" "SELECT pg_logical_emit_message(true, 'test', repeat('x', 64));" "COMMIT;" >"$WORK/commit64.sql"
chmod 644 "$WORK"/*.sql

NPROC=$(nproc)
# pgbench HOST PORT USER SCRIPT CLIENTS -> tps (or "fail")
bench() {
    local host=$1 port=$2 user=$3 script=$4 c=$5 j out tps
    j=$(( c < NPROC ? c : NPROC ))
    if ! out=$("$PG_BINDIR/pgbench" -n -h "$host" -p "$port" -U "$user" -M prepared \
            -f "$WORK/$script.sql" -c "$c" -j "$j" -T "$SECONDS_PER_POINT" postgres 2>&1); then
        echo "$out" >>"$WORK/pgbench-failures.log"
        echo fail; return
    fi
    if ! grep -q "number of failed transactions: 0 " <<<"$out"; then
        echo "$out" >>"$WORK/pgbench-failures.log"
        echo fail; return
    fi
    tps=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)$/\1/p' <<<"$out")
    echo "${tps:-fail}"
}

echo "pg-vs-walshm: $(uname -srm), nproc=$NPROC, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "PostgreSQL: $("$PG_BINDIR/postgres" --version); walshm: $WALSHM_BIN"
echo "pgbench -n -M prepared -T $SECONDS_PER_POINT, -j min(clients, nproc); max_connections=$MAX_CONN on both"
echo
printf '%-9s %-10s %7s %12s %12s %9s\n' script durability clients "PG tps" "walshm tps" "walshm/PG"
for dur in on off; do
    start_pg "$dur" "$dur"
    start_walshm "$dur" "$dur"
    for script in emit16 txid commit64; do
        for c in $CLIENTS; do
            pg=$(bench "$PGSOCK" "$PG_PORT" "$PG_USER" "$script" "$c")
            w=$(bench "$WDATA" "$W_PORT" walshm "$script" "$c")
            if [ "$pg" != fail ] && [ "$w" != fail ]; then
                ratio=$(awk -v a="$w" -v b="$pg" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')
            else
                ratio="-"
            fi
            printf '%-9s %-10s %7s %12s %12s %9s\n' "$script" "$dur" "$c" "$pg" "$w" "$ratio"
        done
    done
    stop_pg
    stop_walshm
done
if [ -s "$WORK/pgbench-failures.log" ]; then
    echo
    echo "pgbench failures:"
    cat "$WORK/pgbench-failures.log"
    exit 1
fi
