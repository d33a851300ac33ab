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
PG_BINDIR="${PG_BINDIR:-/usr/lib/postgresql/15/bin}"
for p in initdb postgres pgbench pg_isready; do
    [ -x "$PG_BINDIR/$p" ] || { echo "error: $PG_BINDIR/$p not found (apt-get install postgresql-15)" >&2; exit 1; }
done
WALSHM_BIN="${WALSHM_BIN:-$ROOT/target/release/postmaster}"
if [ ! -x "$WALSHM_BIN" ]; then
    echo "building walshm (cargo build --release) ..." >&2
    (cd "$ROOT" && cargo build --release --bin postmaster >&2)
    WALSHM_BIN="$ROOT/target/release/postmaster"
fi

MAX_CLIENTS=0
for c in $CLIENTS; do [ "$c" -gt "$MAX_CLIENTS" ] && MAX_CLIENTS=$c; done
MAX_CONN=$(( MAX_CLIENTS + 44 ))
[ "$MAX_CONN" -lt 300 ] && MAX_CONN=300

WORK="$(mktemp -d /tmp/pg-vs-walshm.XXXXXX)"
chmod 755 "$WORK"
PG_PID=""
PG_LAUNCHER=""
W_PID=""

# As root, PostgreSQL must run as another user.
if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || { echo "error: no 'postgres' user to run PostgreSQL as" >&2; exit 1; }
    as_pg() { runuser -u postgres -- "$@"; }
    PG_USER=postgres
else
    as_pg() { "$@"; }
    PG_USER="$(id -un)"
fi

stop_pg() {
    # PG_PID is the postmaster itself (from postmaster.pid), not runuser.
    if [ -n "$PG_PID" ] && kill -0 "$PG_PID" 2>/dev/null; then
        kill -INT "$PG_PID" 2>/dev/null || true   # fast shutdown
        for _ in $(seq 1 300); do kill -0 "$PG_PID" 2>/dev/null || break; sleep 0.1; done
        kill -QUIT "$PG_PID" 2>/dev/null || true  # immediate shutdown
        for _ in $(seq 1 50); do kill -0 "$PG_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$PG_PID" 2>/dev/null || true
    fi
    if [ -n "$PG_LAUNCHER" ]; then
        kill -KILL "$PG_LAUNCHER" 2>/dev/null || true
        wait "$PG_LAUNCHER" 2>/dev/null || true
    fi
    PG_PID=""
    PG_LAUNCHER=""
}

stop_walshm() {
    if [ -n "$W_PID" ] && kill -0 "$W_PID" 2>/dev/null; then
        kill -TERM "$W_PID" 2>/dev/null || true   # fast shutdown
        for _ in $(seq 1 300); do kill -0 "$W_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL -- "-$W_PID" 2>/dev/null || true
        wait "$W_PID" 2>/dev/null || true
    fi
    W_PID=""
}

cleanup() {
    stop_pg
    stop_walshm
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A port number that no Unix socket in our directories uses yet; the
# servers listen on Unix sockets only, so TCP ports are not touched.
rand_port() { echo $(( 20000 + (RANDOM * 32768 + RANDOM) % 40000 )); }
PG_PORT=$(rand_port)
W_PORT=$(rand_port)
while [ "$W_PORT" = "$PG_PORT" ]; do W_PORT=$(rand_port); done

# --- PostgreSQL cluster
PGDATA="$WORK/pgdata"
PGSOCK="$WORK/pgsock"
mkdir -p "$PGDATA" "$PGSOCK"
[ "$(id -u)" = 0 ] && chown "$PG_USER" "$PGDATA" "$PGSOCK"
as_pg "$PG_BINDIR/initdb" -D "$PGDATA" -U "$PG_USER" --auth-local=trust --auth-host=reject \
    -E UTF8 --no-sync >"$WORK/initdb.log" 2>&1 \
    || { cat "$WORK/initdb.log" >&2; exit 1; }

start_pg() { # fsync synchronous_commit
    [ -e "$PGDATA/postmaster.pid" ] && { echo "error: a PostgreSQL server still runs on $PGDATA" >&2; exit 1; }
    : >"$WORK/pg.log"
    [ "$(id -u)" = 0 ] && chown "$PG_USER" "$WORK/pg.log"
    as_pg "$PG_BINDIR/postgres" -D "$PGDATA" -c port="$PG_PORT" -c listen_addresses='' \
        -c unix_socket_directories="$PGSOCK" -c max_connections="$MAX_CONN" \
        -c fsync="$1" -c synchronous_commit="$2" >>"$WORK/pg.log" 2>&1 &
    PG_LAUNCHER=$!
    for _ in $(seq 1 300); do
        [ -z "$PG_PID" ] && [ -s "$PGDATA/postmaster.pid" ] && PG_PID=$(head -n1 "$PGDATA/postmaster.pid")
        [ -n "$PG_PID" ] && "$PG_BINDIR/pg_isready" -q -h "$PGSOCK" -p "$PG_PORT" && return 0
        kill -0 "$PG_LAUNCHER" 2>/dev/null || break
        sleep 0.1
    done
    echo "error: PostgreSQL did not start" >&2; cat "$WORK/pg.log" >&2; exit 1
}

# --- walshm server
WDATA="$WORK/walshm"
"$WALSHM_BIN" init -D "$WDATA" >"$WORK/walshm-init.log" 2>&1 \
    || { cat "$WORK/walshm-init.log" >&2; exit 1; }

start_walshm() { # fsync synchronous_commit
    : >"$WORK/walshm.log"
    setsid "$WALSHM_BIN" start -D "$WDATA" --set port="$W_PORT" --set max_connections="$MAX_CONN" \
        --set fsync="$1" --set synchronous_commit="$2" >>"$WORK/walshm.log" 2>&1 &
    W_PID=$!
    for _ in $(seq 1 300); do
        grep -q "ready to accept connections" "$WORK/walshm.log" && return 0
        kill -0 "$W_PID" 2>/dev/null || break
        sleep 0.1
    done
    echo "error: walshm did not start" >&2; cat "$WORK/walshm.log" >&2; exit 1
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
