#!/usr/bin/env bash
#! replication-bench.sh: streaming replication to PostgreSQL 15's own
#! pg_receivewal, walshm against PostgreSQL 15 on this machine.
#!
#! 1. Durable commits/s (pgbench -M prepared, BEGIN; 64-byte transactional
#!    message; COMMIT; fsync = on, synchronous_commit = on) at N clients,
#!    for each server: local only, and with synchronous replication to a
#!    local `pg_receivewal --synchronous` (synchronous_standby_names =
#!    'pg_receivewal'); walshm's sync rep twice: the defaults
#!    (`sync_rep_one_sleep = on`: one sleep per commit) and
#!    `sync_rep_one_sleep = off` (PostgreSQL's flush, then wait). The
#!    points of one repetition run back to back, and the
#!    --reps repetitions in turn, so that every ratio is same-run. For
#!    walshm also the commits released per status update (from its
#!    walsender's exit log line), and where its rounds spent their time
#!    (the walsender's "streaming rounds" line, replication/src/roundstats.rs:
#!    local flush -> send, the socket writes, send -> the receiver's flush
#!    report, the release pass and commits per pass). Per commit: the server's CPU (as root:
#!    the server runs in a cgroup v1 cpuacct group from its start, so that
#!    every process it forks is counted, exited ones included), the
#!    receiver's CPU (/proc/PID/stat), and the server's context switches
#!    (voluntary + involuntary, summed over the tasks of the group's
#!    processes, sampled from 0.7 s into the run to 0.5 s before its end,
#!    while the backends live).
#! 2. Asynchronous streaming: walshm running `--workers 16 --workload
#!    emit:1024` (fsync = off) for S seconds with a plain pg_receivewal
#!    attached: MB/s of WAL generated against MB/s received, and the lag
#!    (flush position minus what was received) at the end; once per
#!    `max_replication_lag` in --lag-limits (walshm's flow control, 0 =
#!    off), each measured over S seconds from when the receiver first
#!    reported (with a limit: first was within it): also the largest lag
#!    sampled every 0.25 s (insert position minus the receiver's reported
#!    write, pg_stat_replication) and the throttle counters (`postmaster
#!    status --json`).
#!
#! Everything runs on Unix sockets in a temporary directory, removed on
#! exit (trap); PostgreSQL runs as `postgres` when this runs as root.
#!
#! Usage: scripts/replication-bench.sh [--seconds S] [--clients N] [--only 1|2] [--reps R]
#!   --seconds S   length of each point (default 5)
#!   --reps R      repetitions of part 1 (default 1), each printed, then the medians
#!   --clients N   pgbench clients for part 1 (default 64)
#!   --only 1|2    run only part 1 (sync) or part 2 (async)
#!   --workers N   emit:1024 workers for part 2 (default 16)
#!   --lag-limits "L ..."  max_replication_lag values in MB for part 2
#!                 (default "0 64 256"; 0 = off)
#! Environment: PG_BINDIR (default /usr/lib/postgresql/15/bin), WALSHM_BIN
#! (default target/release/postmaster, built with cargo if missing).
set -euo pipefail

SECS=5
CLIENTS=64
ONLY=""
WORKERS=16
REPS=1
LAG_LIMITS="0 64 256"
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) SECS="$2"; shift 2 ;;
        --clients) CLIENTS="$2"; shift 2 ;;
        --only) ONLY="$2"; shift 2 ;;
        --workers) WORKERS="$2"; shift 2 ;;
        --reps) REPS="$2"; shift 2 ;;
        --lag-limits) LAG_LIMITS="$2"; shift 2 ;;
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

# A cpuacct group for the server under test (root and cgroup v1 only): the
# servers start inside it (lib-servers.sh's PG_CGROUPS / W_CGROUPS), so
# every process they fork is counted.
CG=""
if [ "$(id -u)" = 0 ] && [ -d /sys/fs/cgroup/cpuacct ]; then
    CG="/sys/fs/cgroup/cpuacct/replication-bench.$$"
    mkdir -p "$CG"
    PG_CGROUPS="$CG" W_CGROUPS="$CG"
fi
remove_cg() { [ -z "$CG" ] || rmdir "$CG" 2>/dev/null || true; }
cg_ns() { if [ -n "$CG" ]; then cat "$CG/cpuacct.usage"; else echo 0; fi; }
# Back to the root group, so that the group can be removed.
cg_leave() { [ -z "$CG" ] || while read -r p; do echo "$p" >/sys/fs/cgroup/cpuacct/cgroup.procs 2>/dev/null || true; done <"$CG/cgroup.procs"; }
# cg_ctxsw: voluntary + involuntary context switches of every task of the
# group's processes (0 without a group).
cg_ctxsw() {
    [ -n "$CG" ] || { echo 0; return; }
    local p files=()
    while read -r p; do files+=(/proc/"$p"/task/*/status); done <"$CG/cgroup.procs"
    awk '/^(non)?voluntary_ctxt_switches:/ { n += $2 } END { print n + 0 }' "${files[@]}" 2>/dev/null
}
CPU_US="" RX_US="" CTX=""
trap 'cleanup; cg_leave; remove_cg' EXIT

# bench HOST PORT USER -> WORK/tps; CPU_US: the group's CPU per transaction
# (us); RX_US: the receiver's (RX_PID, if any); CTX: the group's context
# switches per transaction over the sampled window.
bench() {
    local out tps c0 c1 r0 r1 x0 x1 t0 t1 tx j=$(( CLIENTS < NPROC ? CLIENTS : NPROC ))
    c0=$(cg_ns) r0=$(rx_ticks)
    "$PG_BINDIR/pgbench" -n -h "$1" -p "$2" -U "$3" -M prepared -f "$WORK/commit64.sql" \
        -c "$CLIENTS" -j "$j" -T "$SECS" postgres >"$WORK/pgbench.out" 2>&1 &
    local pgb=$! started
    started=$(date +%s.%N)
    sleep 0.7
    x0=$(cg_ctxsw) t0=$(date +%s.%N)
    sleep "$(awk -v s="$SECS" -v a="$started" -v b="$t0" 'BEGIN { d = s - 0.5 - (b - a); print (d > 0.2 ? d : 0.2) }')"
    x1=$(cg_ctxsw) t1=$(date +%s.%N)
    if ! wait "$pgb"; then
        cat "$WORK/pgbench.out" >&2; echo fail >"$WORK/tps"; CPU_US=- RX_US=- CTX=-; return
    fi
    c1=$(cg_ns) r1=$(rx_ticks)
    out=$(cat "$WORK/pgbench.out")
    tps=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)$/\1/p' <<<"$out")
    tx=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")
    CPU_US=$(awk -v a="$c0" -v b="$c1" -v n="${tx:-0}" -v g="$CG" 'BEGIN { if (g != "" && n > 0) printf "%.1f", (b - a) / 1000 / n; else print "-" }')
    RX_US=$(awk -v a="$r0" -v b="$r1" -v n="${tx:-0}" -v hz="$(getconf CLK_TCK)" -v rx="$RX_PID" 'BEGIN { if (rx != "" && n > 0) printf "%.1f", (b - a) / hz * 1e6 / n; else print "-" }')
    CTX=$(awk -v a="$x0" -v b="$x1" -v t0="$t0" -v t1="$t1" -v tps="${tps:-0}" -v g="$CG" 'BEGIN { if (g != "" && tps > 0) printf "%.2f", (b - a) / ((t1 - t0) * tps); else print "-" }')
    echo "${tps:-fail}" >"$WORK/tps"
}
rx_ticks() { if [ -n "$RX_PID" ]; then cpu_ticks "$RX_PID"; else echo 0; fi; }

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }

echo "replication-bench: $(uname -srm), nproc=$NPROC; $("$PG_BINDIR/postgres" --version); walshm: $WALSHM_BIN"
# cpu_ticks PID: user + system CPU of PID in clock ticks (0 when gone).
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0; }

# One point of part 1: ROW NAME of the results, then the server's start.
# point NAME START_CMD ARGS...: runs bench against it, with a synchronous
# receiver when NAME ends in "sync"; appends "NAME tps cpu rx ctx upd" to
# WORK/points.
point() {
    local name=$1 upd=-; shift
    "$@"
    local host port user
    case "$name" in
        pg*) host=$PGSOCK port=$PG_PORT user=$PG_USER ;;
        *) host=$WDATA port=$W_PORT user=walshm ;;
    esac
    case "$name" in
        *sync*) start_rx "$host" "$port" "$WORK/rx-$name" --synchronous ;;
    esac
    bench "$host" "$port" "$user"
    stop_rx
    case "$name" in
        pg*) stop_pg ;;
        *)
            sleep 0.5
            stop_walshm
            upd=$(sed -n 's/.*synchronous replication: .*(\([0-9.]*\) per update).*/\1/p' "$WORK/walshm.log" | tail -n1)
            case "$name" in
                *sync*) sed -n "s/.*LOG:  streaming rounds: /  $name rounds: /p" "$WORK/walshm.log" | tail -n1 >>"$WORK/rounds" ;;
            esac
            ;;
    esac
    echo "$name $(cat "$WORK/tps") $CPU_US $RX_US $CTX ${upd:--}" >>"$WORK/points"
}

W_SYNC=(--set fsync=on --set synchronous_commit=on --set synchronous_standby_names=pg_receivewal)
part1() {
    echo "part 1: pgbench -M prepared -c $CLIENTS -T $SECS, BEGIN; emit(true, 64 B); COMMIT; fsync=on, synchronous_commit=on; $REPS repetition(s)"
    : >"$WORK/points"; : >"$WORK/rounds"
    local rep
    for rep in $(seq 1 "$REPS"); do
        point pg-local start_pg ""
        point pg-sync start_pg "pg_receivewal"
        point w-local start_walshm --set fsync=on --set synchronous_commit=on
        point w-sync-2sleep start_walshm "${W_SYNC[@]}" --set sync_rep_one_sleep=off
        point w-sync start_walshm "${W_SYNC[@]}" --set sync_rep_one_sleep=on
        echo "repetition $rep:"
        tail -n 5 "$WORK/points" | report_points
        cat "$WORK/rounds"; : >"$WORK/rounds"
    done
    if [ "$REPS" -gt 1 ]; then
        echo "medians over $REPS repetitions (of each figure and of each same-run ratio):"
        report_medians <"$WORK/points"
    fi
    echo "(us/tx: CPU per transaction of the server (all its processes, cgroup cpuacct) and of pg_receivewal; ctx/tx: the server's context switches per transaction; '-' when not root)"
}

# report_points: the table of one repetition (5 lines of WORK/points).
report_points() {
    awk '{ tps[$1] = $2; cpu[$1] = $3; rx[$1] = $4; ctx[$1] = $5; upd[$1] = $6; order[++n] = $1 }
    function r(a, b) { return (b > 0) ? sprintf("%.2f", a / b) : "-" }
    END {
        printf "  %-14s %10s %10s %10s %9s %12s\n", "point", "tps", "us/tx", "rx us/tx", "ctx/tx", "per update"
        for (i = 1; i <= n; i++) { k = order[i]; printf "  %-14s %10.0f %10s %10s %9s %12s\n", k, tps[k], cpu[k], rx[k], ctx[k], upd[k] }
        printf "  walshm sync / PostgreSQL sync: %s (two-sleep form: %s); walshm sync / local: %s (PostgreSQL: %s); one-sleep / two-sleep: %s\n",
            r(tps["w-sync"], tps["pg-sync"]), r(tps["w-sync-2sleep"], tps["pg-sync"]), r(tps["w-sync"], tps["w-local"]),
            r(tps["pg-sync"], tps["pg-local"]), r(tps["w-sync"], tps["w-sync-2sleep"])
    }'
}

# report_medians: medians of every figure and ratio over the repetitions.
report_medians() {
    awk 'function med(arr, m,   i, j, t) { for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (arr[j] < arr[i]) { t = arr[i]; arr[i] = arr[j]; arr[j] = t }
            return (m % 2) ? arr[(m + 1) / 2] : (arr[m / 2] + arr[m / 2 + 1]) / 2 }
    { rep = int((NR - 1) / 5) + 1; v[$1, "tps", rep] = $2; v[$1, "cpu", rep] = $3; v[$1, "rx", rep] = $4; v[$1, "ctx", rep] = $5; v[$1, "upd", rep] = $6; reps = rep; names[$1] = 1 }
    END {
        split("pg-local pg-sync w-local w-sync-2sleep w-sync", order, " ")
        split("tps cpu rx ctx upd", figs, " ")
        printf "  %-14s %10s %10s %10s %9s %12s\n", "point", "tps", "us/tx", "rx us/tx", "ctx/tx", "per update"
        for (i = 1; i <= 5; i++) {
            k = order[i]; line = sprintf("  %-14s", k)
            for (f = 1; f <= 5; f++) { m = 0; delete a; for (r = 1; r <= reps; r++) { x = v[k, figs[f], r]; if (x != "-" && x != "") a[++m] = x + 0 }
                w = (f == 1) ? 10 : (f == 4 ? 9 : (f == 5 ? 12 : 10)); line = line sprintf(" %" w "s", m ? sprintf(f == 1 ? "%.0f" : "%.2f", med(a, m)) : "-") }
            print line
        }
        split("w-sync/pg-sync w-sync-2sleep/pg-sync w-sync/w-local pg-sync/pg-local w-sync/w-sync-2sleep", ratios, " ")
        for (i = 1; i <= 5; i++) { split(ratios[i], ab, "/"); m = 0; delete a; list = ""
            for (r = 1; r <= reps; r++) { b = v[ab[2], "tps", r] + 0; if (b > 0) { a[++m] = v[ab[1], "tps", r] / b; list = list sprintf(" %.2f", a[m]) } }
            printf "  %-26s median %s (each:%s)\n", ratios[i], m ? sprintf("%.2f", med(a, m)) : "-", list }
    }'
}

part2() {
    echo "part 2: walshm --workers $WORKERS --workload emit:1024 (fsync=off) for $SECS s, async pg_receivewal attached; max_replication_lag (MB): $LAG_LIMITS"
    sql() { "$PG_BINDIR/psql" -X -A -t -h "$WDATA" -p "$W_PORT" -U walshm -d postgres -c "$1"; }
    lsn_bytes() { local hi=${1%/*} lo=${1#*/}; echo $(( (16#$hi << 32) + 16#$lo )); }
    local limit
    for limit in $LAG_LIMITS; do
        part2_point "$limit"
    done
}

# drop_bench_slot: once its walsender has gone (retried for 2 s).
drop_bench_slot() {
    local _i
    for _i in $(seq 20); do
        sql "SELECT pg_drop_replication_slot('bench')" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    echo "warning: could not drop slot bench" >&2
}

# part2_point LIMIT_MB: one asynchronous point with max_replication_lag.
part2_point() {
    local limit=$1 lagq="SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), write_lsn) FROM pg_stat_replication"
    start_walshm --set fsync=off --set max_slot_wal_keep_size=8GB --set max_replication_lag="${limit}MB" \
        --workers "$WORKERS" --workload emit:1024
    # A slot keeps the WAL the receiver has not got yet (bounded), so that a
    # receiver that falls behind shows as lag instead of losing its
    # segments; made for each point (at the insert position) and dropped
    # after it, so that no point starts behind the previous one's end.
    sql "SELECT pg_create_physical_replication_slot('bench', true)" >/dev/null
    start_rx "$WDATA" "$W_PORT" "$WORK/rx-async" --slot bench
    # Warm-up: until the receiver reported, and with a limit until it is
    # within it (+ L/16: each worker may insert a check interval, L/64 up
    # to 1 MiB, past the point); the measured window starts then. bound:
    # the limit plus one check interval per worker.
    local lag worst=0 catchup="-" t_start inside=$(( (limit << 20) + (limit << 16) )) ival bound
    ival=$(( limit << 14 )); [ "$ival" -gt 1048576 ] && ival=1048576; [ "$ival" -lt 8192 ] && ival=8192
    bound=$(( (limit << 20) + WORKERS * ival ))
    t_start=$(date +%s.%N)
    for _ in $(seq 1 80); do
        lag=$(sql "$lagq" | cut -d. -f1)
        if [ -n "$lag" ] && { [ "$limit" = 0 ] || [ "$lag" -le "$inside" ]; }; then
            catchup=$(awk -v a="$t_start" -v n="$(date +%s.%N)" 'BEGIN { printf "%.1f", n - a }')
            break
        fi
        sleep 0.25
    done
    t0=$(date +%s.%N)
    start_lsn=$(lsn_bytes "$(sql 'SELECT pg_current_wal_flush_lsn()')")
    row0=$(sql "SELECT * FROM pg_stat_replication")
    sent0=$(cut -d'|' -f11 <<<"$row0")
    ws_pid=$(cut -d'|' -f1 <<<"$row0")
    ws_cpu0=$(cpu_ticks "$ws_pid") rx_cpu0=$(cpu_ticks "$RX_PID")
    # Lag samples every 0.25 s over the window: the largest.
    local end_at
    end_at=$(awk -v a="$t0" -v s="$SECS" 'BEGIN { printf "%.3f", a + s }')
    while awk -v e="$end_at" -v n="$(date +%s.%N)" 'BEGIN { exit !(n < e) }'; do
        lag=$(sql "$lagq" | cut -d. -f1)
        if [ -n "$lag" ] && [ "$lag" -gt "$worst" ]; then worst=$lag; fi
        sleep 0.25
    done
    ws_cpu1=$(cpu_ticks "$ws_pid") rx_cpu1=$(cpu_ticks "$RX_PID")
    row=$(sql "SELECT * FROM pg_stat_replication")
    flush_lsn=$(lsn_bytes "$(sql 'SELECT pg_current_wal_flush_lsn()')")
    t1=$(date +%s.%N)
    throttle=$("$WALSHM_BIN" status -D "$WDATA" --json | sed -n 's/.*"throttle":{\([^}]*\)}.*/\1/p')
    sent1=$(cut -d'|' -f11 <<<"$row")
    stop_rx
    drop_bench_slot
    stop_walshm
    if [ -z "$sent0" ] || [ -z "$sent1" ]; then
        echo "pg_receivewal was not streaming at the start or the end of the run (see $WORK/rx-async.log)"
        cat "$WORK/rx-async.log" >&2
        exit 1
    fi
    sent_start=$(lsn_bytes "$sent0")
    sent_lsn=$(lsn_bytes "$sent1")
    echo "max_replication_lag = ${limit}MB:"
    awk -v s="$start_lsn" -v f="$flush_lsn" -v q="$sent_start" -v r="$sent_lsn" -v t0="$t0" -v t1="$t1" 'BEGIN {
        t = t1 - t0; gen = (f - s) / t / 1e6; sent = (r - q) / t / 1e6;
        printf "  generated %.1f MB/s, sent %.1f MB/s (%.0f%%), lag at the end %.1f MB\n", gen, sent, 100 * sent / gen, (f - r) / 1e6 }'
    awk -v w="$worst" -v c="$catchup" -v l="$limit" -v b="$bound" 'BEGIN {
        printf "  largest sampled lag %.1f MiB (limit %s, bound %.0f MiB); window from %s after the receiver started (reported%s)\n",
            w / 1048576, (l == 0 ? "off" : l " MiB"), b / 1048576, (c == "-" ? "a 20 s warm-up, never within the limit" : c " s"), (l == 0 ? "" : ", within the limit") }'
    echo "  throttle: ${throttle:--}"
    awk -v t0="$t0" -v t1="$t1" -v w0="$ws_cpu0" -v w1="$ws_cpu1" -v r0="$rx_cpu0" -v r1="$rx_cpu1" \
        -v hz="$(getconf CLK_TCK)" -v q="$sent_start" -v r="$sent_lsn" 'BEGIN {
        t = t1 - t0; mb = (r - q) / 1e6; if (mb <= 0) mb = 1e-9; ws = (w1 - w0) / hz; rx = (r1 - r0) / hz;
        printf "  CPU: walsender %.0f%% of a core (%.2f ms/MB sent), pg_receivewal %.0f%% (%.2f ms/MB)\n",
            100 * ws / t, 1000 * ws / mb, 100 * rx / t, 1000 * rx / mb }'
}

[ "$ONLY" = 2 ] || part1
[ -n "$ONLY" ] || echo
[ "$ONLY" = 1 ] || part2
echo "(one run; the machine's cores are shared by the servers, pgbench and pg_receivewal)"
