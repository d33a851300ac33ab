#!/usr/bin/env bash
#! replication-bench.sh: streaming replication to PostgreSQL 15's own
#! pg_receivewal, walshm against PostgreSQL 15 on this machine (issue 13).
#!
#! 1. Durable commits/s (pgbench -M prepared, BEGIN; 64-byte transactional
#!    message; COMMIT; fsync = on, synchronous_commit = on) at N clients,
#!    for each server: local only, and with synchronous replication to a
#!    local `pg_receivewal --synchronous` (synchronous_standby_names =
#!    'pg_receivewal'). For walshm also the commits released per status
#!    update (from its walsender's exit log line), and the server's CPU
#!    per commit: as root, the postmaster is moved into a cgroup v1
#!    cpuacct group right after it starts, so that the backends and the
#!    walsender it forks for the run are counted (processes it forked
#!    before, such as the walwriter, are not, for either server).
#! 2. Asynchronous streaming: walshm running `--workers 16 --workload
#!    emit:1024` (fsync = off) for S seconds with a plain pg_receivewal
#!    attached: MB/s of WAL generated against MB/s received, and the lag
#!    (flush position minus what was received) at the end.
#!
#! Everything runs on Unix sockets in a temporary directory, removed on
#! exit (trap); PostgreSQL runs as `postgres` when this runs as root.
#!
#! Usage: scripts/replication-bench.sh [--seconds S] [--clients N] [--only 1|2]
#!   --seconds S   length of each point (default 5)
#!   --clients N   pgbench clients for part 1 (default 64)
#!   --only 1|2    run only part 1 (sync) or part 2 (async)
#!   --workers N   emit:1024 workers for part 2 (default 16)
#! Environment: PG_BINDIR (default /usr/lib/postgresql/15/bin), WALSHM_BIN
#! (default target/release/postmaster, built with cargo if missing).
set -euo pipefail

SECS=5
CLIENTS=64
ONLY=""
WORKERS=16
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) SECS="$2"; shift 2 ;;
        --clients) CLIENTS="$2"; shift 2 ;;
        --only) ONLY="$2"; shift 2 ;;
        --workers) WORKERS="$2"; shift 2 ;;
        -h|--help) sed -n '1d; s/^#! \{0,1\}//p' "$0"; exit 0 ;;
        *) echo "unknown option: $1" >&2; exit 2 ;;
    esac
done

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=scripts/lib-servers.sh
. "$ROOT/scripts/lib-servers.sh"
need_pg_tools initdb postgres pgbench pg_isready pg_receivewal psql
find_walshm

WORK="$(mktemp -d /tmp/replication-bench.XXXXXX)"
chmod 755 "$WORK"
PG_PID="" PG_LAUNCHER="" W_PID="" RX_PID=""

pg_user

stop_rx() {
    if [ -n "$RX_PID" ]; then
        kill -KILL -- "-$RX_PID" 2>/dev/null || true
        wait "$RX_PID" 2>/dev/null || true
    fi
    RX_PID=""
}

trap_cleanup
pick_ports
MAX_CONN=$(( CLIENTS + 20 ))

PGDATA="$WORK/pgdata"
PGSOCK="$WORK/pgsock"
init_pg

start_pg() { # synchronous_standby_names
    launch_pg -c fsync=on -c synchronous_commit=on -c synchronous_standby_names="$1"
}

WDATA="$WORK/walshm"
init_walshm

walshm_ready() { [ -S "$WDATA/.s.PGSQL.$W_PORT" ] && "$PG_BINDIR/pg_isready" -q -h "$WDATA" -p "$W_PORT"; }
start_walshm() { # extra args...
    launch_walshm walshm_ready "$@"
}

start_rx() { # host port dir [--synchronous]
    rm -rf "$3"; mkdir -p "$3"
    local host=$1 port=$2 dir=$3; shift 3
    setsid "$PG_BINDIR/pg_receivewal" -h "$host" -p "$port" -U "$PG_USER" -w -D "$dir" "$@" \
        >"$dir.log" 2>&1 &
    RX_PID=$!
    sleep 1
}

printf '%s\n' "BEGIN;" "SELECT pg_logical_emit_message(true, 'test', repeat('x', 64));" "COMMIT;" \
    >"$WORK/commit64.sql"
chmod 644 "$WORK/commit64.sql"
NPROC=$(nproc)

# A cpuacct group for the server under test (root and cgroup v1 only).
CG=""
if [ "$(id -u)" = 0 ] && [ -d /sys/fs/cgroup/cpuacct ]; then
    CG="/sys/fs/cgroup/cpuacct/replication-bench.$$"
    mkdir -p "$CG"
fi
remove_cg() { [ -z "$CG" ] || rmdir "$CG" 2>/dev/null || true; }
cg_join() { [ -z "$CG" ] || echo "$1" >"$CG/cgroup.procs"; } # PID
cg_ns() { if [ -n "$CG" ]; then cat "$CG/cpuacct.usage"; else echo 0; fi; }
# Back to the root group, so that the group can be removed.
cg_leave() { [ -z "$CG" ] || while read -r p; do echo "$p" >/sys/fs/cgroup/cpuacct/cgroup.procs 2>/dev/null || true; done <"$CG/cgroup.procs"; }
CPU_US=""
trap 'cleanup; cg_leave; remove_cg' EXIT

bench() { # host port user -> tps; CPU_US: the group's CPU per transaction (us)
    local out tps c0 c1 j=$(( CLIENTS < NPROC ? CLIENTS : NPROC ))
    c0=$(cg_ns)
    out=$("$PG_BINDIR/pgbench" -n -h "$1" -p "$2" -U "$3" -M prepared -f "$WORK/commit64.sql" \
        -c "$CLIENTS" -j "$j" -T "$SECS" postgres 2>&1) || { echo "$out" >&2; echo fail >"$WORK/tps"; CPU_US=-; return; }
    c1=$(cg_ns)
    tps=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)$/\1/p' <<<"$out")
    local tx
    tx=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")
    CPU_US=$(awk -v a="$c0" -v b="$c1" -v n="${tx:-0}" -v g="$CG" 'BEGIN { if (g != "" && n > 0) printf "%.1f", (b - a) / 1000 / n; else print "-" }')
    echo "${tps:-fail}" >"$WORK/tps"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }

echo "replication-bench: $(uname -srm), nproc=$NPROC; $("$PG_BINDIR/postgres" --version); walshm: $WALSHM_BIN"
# cpu_ticks PID: user + system CPU of PID in clock ticks (0 when gone).
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0; }

part1() {
    echo "part 1: pgbench -M prepared -c $CLIENTS -T $SECS, BEGIN; emit(true, 64 B); COMMIT; fsync=on, synchronous_commit=on"

    start_pg ""
    cg_join "$PG_PID"
    bench "$PGSOCK" "$PG_PORT" "$PG_USER"; pg_local=$(cat "$WORK/tps") pg_local_cpu=$CPU_US
    stop_pg
    start_pg "pg_receivewal"
    cg_join "$PG_PID"
    start_rx "$PGSOCK" "$PG_PORT" "$WORK/rx-pg" --synchronous
    bench "$PGSOCK" "$PG_PORT" "$PG_USER"; pg_sync=$(cat "$WORK/tps") pg_sync_cpu=$CPU_US
    stop_rx
    stop_pg

    start_walshm --set fsync=on --set synchronous_commit=on
    cg_join "$W_PID"
    bench "$WDATA" "$W_PORT" walshm; w_local=$(cat "$WORK/tps") w_local_cpu=$CPU_US
    stop_walshm
    start_walshm --set fsync=on --set synchronous_commit=on --set synchronous_standby_names=pg_receivewal
    cg_join "$W_PID"
    start_rx "$WDATA" "$W_PORT" "$WORK/rx-w" --synchronous
    bench "$WDATA" "$W_PORT" walshm; w_sync=$(cat "$WORK/tps") w_sync_cpu=$CPU_US
    stop_rx
    sleep 0.5
    per_update=$(sed -n 's/.*synchronous replication: .*(\([0-9.]*\) per update).*/\1/p' "$WORK/walshm.log" | tail -n1)
    stop_walshm

    printf '%-10s %14s %14s %10s %14s %14s\n' server "local tps" "sync-rep tps" "sync/local" "local us/tx" "sync us/tx"
    printf '%-10s %14s %14s %10s %14s %14s\n' PostgreSQL "$pg_local" "$pg_sync" "$(ratio "$pg_sync" "$pg_local")" "$pg_local_cpu" "$pg_sync_cpu"
    printf '%-10s %14s %14s %10s %14s %14s\n' walshm "$w_local" "$w_sync" "$(ratio "$w_sync" "$w_local")" "$w_local_cpu" "$w_sync_cpu"
    echo "(us/tx: CPU of the server's backends and walsender per transaction, cgroup cpuacct; '-' when not root)"
    echo "walshm sync-rep / PostgreSQL sync-rep: $(ratio "$w_sync" "$pg_sync"); commits released per status update: ${per_update:-?}"

}

part2() {
    echo "part 2: walshm --workers $WORKERS --workload emit:1024 (fsync=off) for $SECS s, async pg_receivewal attached"
    sql() { "$PG_BINDIR/psql" -X -A -t -h "$WDATA" -p "$W_PORT" -U walshm -d postgres -c "$1"; }
    lsn_bytes() { local hi=${1%/*} lo=${1#*/}; echo $(( (16#$hi << 32) + 16#$lo )); }
    # A slot keeps the WAL the receiver has not got yet (bounded), so that a
    # receiver that falls behind shows as lag instead of losing its segments.
    start_walshm --set fsync=off --set max_slot_wal_keep_size=8GB
    sql "SELECT pg_create_physical_replication_slot('bench', true)" >/dev/null
    stop_walshm
    start_walshm --set fsync=off --set max_slot_wal_keep_size=8GB --workers "$WORKERS" --workload emit:1024
    start_rx "$WDATA" "$W_PORT" "$WORK/rx-async" --slot bench
    t0=$(date +%s.%N)
    start_lsn=$(lsn_bytes "$(sql 'SELECT pg_current_wal_flush_lsn()')")
    row0=$(sql "SELECT * FROM pg_stat_replication")
    sent0=$(cut -d'|' -f11 <<<"$row0")
    ws_pid=$(cut -d'|' -f1 <<<"$row0")
    ws_cpu0=$(cpu_ticks "$ws_pid") rx_cpu0=$(cpu_ticks "$RX_PID")
    sleep "$SECS"
    ws_cpu1=$(cpu_ticks "$ws_pid") rx_cpu1=$(cpu_ticks "$RX_PID")
    row=$(sql "SELECT * FROM pg_stat_replication")
    flush_lsn=$(lsn_bytes "$(sql 'SELECT pg_current_wal_flush_lsn()')")
    t1=$(date +%s.%N)
    sent1=$(cut -d'|' -f11 <<<"$row")
    stop_rx
    stop_walshm
    if [ -z "$sent0" ] || [ -z "$sent1" ]; then
        echo "pg_receivewal was not streaming at the start or the end of the run (see $WORK/rx-async.log)"
        cat "$WORK/rx-async.log" >&2
        exit 1
    fi
    sent_start=$(lsn_bytes "$sent0")
    sent_lsn=$(lsn_bytes "$sent1")
    awk -v s="$start_lsn" -v f="$flush_lsn" -v q="$sent_start" -v r="$sent_lsn" -v t0="$t0" -v t1="$t1" 'BEGIN {
        t = t1 - t0; gen = (f - s) / t / 1e6; sent = (r - q) / t / 1e6;
        printf "generated %.1f MB/s, sent %.1f MB/s (%.0f%%), lag at the end %.1f MB\n", gen, sent, 100 * sent / gen, (f - r) / 1e6 }'
    awk -v t0="$t0" -v t1="$t1" -v w0="$ws_cpu0" -v w1="$ws_cpu1" -v r0="$rx_cpu0" -v r1="$rx_cpu1" \
        -v hz="$(getconf CLK_TCK)" -v q="$sent_start" -v r="$sent_lsn" 'BEGIN {
        t = t1 - t0; mb = (r - q) / 1e6; if (mb <= 0) mb = 1e-9; ws = (w1 - w0) / hz; rx = (r1 - r0) / hz;
        printf "CPU: walsender %.0f%% of a core (%.2f ms/MB sent), pg_receivewal %.0f%% (%.2f ms/MB)\n",
            100 * ws / t, 1000 * ws / mb, 100 * rx / t, 1000 * rx / mb }'
}

[ "$ONLY" = 2 ] || part1
[ -n "$ONLY" ] || echo
[ "$ONLY" = 1 ] || part2
echo "(one run; the machine's cores are shared by the servers, pgbench and pg_receivewal)"
