#!/usr/bin/env bash
#! pg-vs-walshm.sh: runs identical pgbench commands against a temporary
#! PostgreSQL 15 cluster and a temporary walshm server (optionally also a
#! second, "baseline" walshm binary) on this machine and prints, per point
#! and per server, throughput and what each transaction cost:
#!   tps     pgbench tps (without initial connection time; with --connect:
#!           including reconnections, i.e. connections/s)
#!   srvCPU  server CPU per transaction, us: every process of the server,
#!           exited connection backends included (cgroup cpuacct; without
#!           writable cgroups the live process tree from /proc, children
#!           reaped by their parent included through cutime/cstime)
#!   pgbCPU  pgbench's own CPU per transaction, us (its own cgroup, or its
#!           rusage): when srvCPU + pgbCPU approach nproc / tps the machine
#!           is full and pgbench, not the server, is the limit
#!   cs      context switches per transaction of the server's processes,
#!           exited ones included (perf stat -a -G on the server's cgroup2
#!           group; "-" when perf or cgroup2 is unavailable)
#!   fsync   fdatasyncs per transaction: pg_stat_wal.wal_sync before and
#!           after, queried with psql outside the timed run
#!   poll    pgbench's poll/ppoll/select calls per transaction (perf stat
#!           syscall tracepoints on pgbench; "-" without them): how often
#!           pgbench goes to sleep and is woken per reply. About 2 recv + 1
#!           poll per reply when each reply arrives alone, far below 1 poll
#!           when replies pile up while pgbench works; each wake-up costs
#!           pgbench CPU, so pgbCPU rises with it (see "Why pgbCPU differs")
#!   srv%    server CPU as a share of the machine (nproc x the run's time:
#!           transactions / tps + pgbench's initial connection time),
#!           percent; pgb% the same for pgbench
#!   limit   client: pgbench is the limit (its threads are >= 90% busy, or
#!           srv% + pgb% >= 90 and pgb% >= srv%); server: the cores are
#!           >= 90% full and the server takes the larger share; others:
#!           srv% + pgb% < 90 but the machine was >= 90% busy (/proc/stat:
#!           other processes took the CPU, the figures are not a limit);
#!           wait: the cores are not full, so round trips, fsync or lock
#!           waits set the pace.
#!           When the cores are full, tps = nproc / (srvCPU + pgbCPU): a
#!           server only gains by its own share of that sum
#! Every figure covers the whole pgbench run, its connection set-up included.
#! Ratios: w/PG = walshm tps / PG tps, PG/w = PG srvCPU / walshm srvCPU
#! (walshm's aim: >= 2 for both); with --baseline also w/b and b/w.
#!
#! Why pgbCPU differs between servers: it is pgbench's real CPU
#! (its cgroup, perf stat task-clock, its rusage and /proc utime+stime agree
#! within ~1 us/tx), and its CPU per transaction depends on how its wake-ups
#! fall: one wake-up (a poll over all of a thread's connections, two recv,
#! a context switch) per reply, or one per several replies. That depends on
#! the scheduler: every server is started in its own session (--server-session
#! own, like a service), hence its own autogroup when autogroup scheduling is
#! on; a server in pgbench's own session (shared) is scheduled as peers of
#! pgbench's threads, and then walshm's fast replies pile up as PG's do.
#!
#! Scripts (pgbench -n -f): emit16 (non-transactional 16-byte
#! pg_logical_emit_message), txid (txid_current()), commit64 (BEGIN; 64-byte
#! transactional message; COMMIT), autocommit (\set n random(1, 1000000);
#! SELECT pg_logical_emit_message(true, 'k', :n::text)), multi (BEGIN;
#! txid_current(); three 64-byte transactional messages; COMMIT), select1
#! (SELECT 1). Durability "on" (fsync=on, synchronous_commit=on) and "off"
#! (both off), on every server alike. Per point the servers run one after the
#! other (PG, walshm, baseline), all started at once per durability setting.
#! Servers listen on Unix sockets only; PostgreSQL runs as the `postgres`
#! system user when this runs as root. Servers, directories and cgroups are
#! removed on exit (trap), whatever happens; the work directory is made
#! under TMPDIR (default /tmp).
#!
#! Usage: scripts/pg-vs-walshm.sh [options]
#!   --seconds S        pgbench -T per point and server (default 3)
#!   --clients LIST     client counts (default "1 4 16 64 256")
#!   --scripts LIST     scripts (default "emit16 txid commit64 autocommit multi select1")
#!   --modes LIST       pgbench -M modes for every script (default: prepared
#!                      for every script, plus simple and extended for
#!                      select1 and emit16)
#!   --durability LIST  "on off" (default), "on" or "off"
#!   --connect          adds the connection rate: pgbench -C -M simple, select1
#!   --quick            fewer points: clients "1 16 256", prepared only
#!                      (explicit --clients / --modes win)
#!   --baseline BIN     a second walshm postmaster binary, measured in the
#!                      same run as a third server (before/after in one table)
#!   --server-session own|shared
#!                      own (default): each server in a session (autogroup) of
#!                      its own; shared: in this script's session, with pgbench
#!   --csv FILE         also write every figure, one row per server and point
#! Lists take spaces or commas: --modes simple,extended --clients 4,16.
#! Environment: PG_BINDIR (default /usr/lib/postgresql/15/bin), WALSHM_BIN
#! (default target/release/postmaster, built with cargo if missing),
#! PGVS_NO_CGROUPS=1 (use the /proc and rusage fallback even as root),
#! WALSHM_SETS / BASELINE_SETS ("NAME=VALUE ...": extra --set for the walshm
#! / baseline server; with --baseline of the same binary, a settings A/B).
#! Default full run: 100 points x 2 servers x 3 s = 10 min of pgbench, about
#! 12 min in all.
set -euo pipefail

SECONDS_PER_POINT=3
CLIENTS="" MODES="" SCRIPTS="emit16 txid commit64 autocommit multi select1"
DURABILITY="on off" CONNECT=0 QUICK=0 BASELINE_BIN="" CSV="" SERVER_SESSION=own
# list_arg VALUE: a list given with spaces or commas, space-separated.
list_arg() { tr ',' ' ' <<<"$1"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) SECONDS_PER_POINT="$2"; shift 2 ;;
        --clients) CLIENTS=$(list_arg "$2"); shift 2 ;;
        --scripts) SCRIPTS=$(list_arg "$2"); shift 2 ;;
        --modes) MODES=$(list_arg "$2"); shift 2 ;;
        --durability) DURABILITY=$(list_arg "$2"); shift 2 ;;
        --server-session) SERVER_SESSION="$2"; shift 2 ;;
        --connect) CONNECT=1; shift ;;
        --quick) QUICK=1; shift ;;
        --baseline) BASELINE_BIN="$2"; shift 2 ;;
        --csv) CSV="$2"; shift 2 ;;
        -h|--help) sed -n '1d; s/^#! \{0,1\}//p' "$0"; exit 0 ;;
        *) echo "unknown option: $1 (see --help)" >&2; exit 2 ;;
    esac
done
if [ "$QUICK" = 1 ]; then
    CLIENTS=${CLIENTS:-"1 16 256"}
    MODES=${MODES:-prepared}
fi
CLIENTS=${CLIENTS:-"1 4 16 64 256"}
for s in $SCRIPTS; do
    case "$s" in emit16|txid|commit64|autocommit|multi|select1) ;;
        *) echo "unknown script: $s" >&2; exit 2 ;; esac
done
for m in $MODES; do
    case "$m" in prepared|simple|extended) ;; *) echo "unknown mode: $m" >&2; exit 2 ;; esac
done
for d in $DURABILITY; do
    case "$d" in on|off) ;; *) echo "unknown durability: $d (on or off)" >&2; exit 2 ;; esac
done
case "$SERVER_SESSION" in own|shared) ;; *) echo "unknown --server-session: $SERVER_SESSION (own or shared)" >&2; exit 2 ;; esac
if [ -n "$BASELINE_BIN" ] && [ ! -x "$BASELINE_BIN" ]; then
    echo "error: --baseline $BASELINE_BIN is not an executable" >&2; exit 2
fi

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=scripts/lib-servers.sh
. "$ROOT/scripts/lib-servers.sh"
need_pg_tools initdb postgres pgbench pg_isready psql
find_walshm

# POINTS: "script:mode" in the order they are measured.
POINTS=""
for s in $SCRIPTS; do
    if [ -n "$MODES" ]; then
        for m in $MODES; do POINTS="$POINTS $s:$m"; done
    else
        POINTS="$POINTS $s:prepared"
        case "$s" in select1|emit16) POINTS="$POINTS $s:simple $s:extended" ;; esac
    fi
done
[ "$CONNECT" = 1 ] && POINTS="$POINTS select1:connect"

MAX_CLIENTS=0
for c in $CLIENTS; do [ "$c" -gt "$MAX_CLIENTS" ] && MAX_CLIENTS=$c; done
MAX_CONN=$(( MAX_CLIENTS + 44 ))
[ "$MAX_CONN" -lt 300 ] && MAX_CONN=300

WORK="$(mktemp -d "${TMPDIR:-/tmp}/pg-vs-walshm.XXXXXX")"
chmod 755 "$WORK"
PG_PID="" PG_LAUNCHER="" W_PID="" B_PID=""
PG_STOP_QUIT=1
SERVERS="pg w"
[ -n "$BASELINE_BIN" ] && SERVERS="pg w b"

# --- accounting: cgroups (created here, removed in cleanup_extra)
CG1_ROOT=$(awk '$3 == "cgroup" && $4 ~ /(^|,)cpuacct(,|$)/ { print $2; exit }' /proc/mounts)
CG2_ROOT=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/mounts)
CG_PREFIX="pgvs-$$"
CREATED_CGROUPS=""
# make_cgroup ROOT NAME: creates ROOT/NAME, prints it; fails quietly.
make_cgroup() {
    [ -n "$1" ] && mkdir "$1/$2" 2>/dev/null || return 1
    CREATED_CGROUPS="$CREATED_CGROUPS $1/$2"
    echo "$1/$2"
}
# remove_cgroups: rmdir each group once its processes have exited (the
# servers are stopped before this runs; wait a little for their exit).
remove_cgroups() {
    local d
    for d in $CREATED_CGROUPS; do
        for _ in $(seq 1 50); do
            [ -s "$d/cgroup.procs" ] || break
            sleep 0.1
        done
        rmdir "$d" 2>/dev/null || echo "warning: could not remove cgroup $d" >&2
    done
    CREATED_CGROUPS=""
}
cleanup_extra() {
    stop_walshm_pid "$B_PID"
    B_PID=""
    remove_cgroups
}

pg_user
trap_cleanup

# CPU_METHOD: cgroup (v1 cpuacct.usage), cgroup2 (cpu.stat usage_usec) or
# proc (live process tree). CS_METHOD: perf (perf stat -a -G on a cgroup2
# group) or none.
declare -A CPUDIR PERFNAME CGS
# make_cgroup runs in $( ) here: its subshell cannot record what it made, so
# every probe and group is recorded (or removed) by the caller right away.
CPU_METHOD=proc CS_METHOD=none
if [ "${PGVS_NO_CGROUPS:-0}" = 1 ]; then
    :
elif d=$(make_cgroup "$CG1_ROOT" "$CG_PREFIX-probe"); then
    CPU_METHOD=cgroup; rmdir "$d"
elif d=$(make_cgroup "$CG2_ROOT" "$CG_PREFIX-probe"); then
    [ -r "$d/cpu.stat" ] && CPU_METHOD=cgroup2
    rmdir "$d"
fi
if [ "${PGVS_NO_CGROUPS:-0}" != 1 ] && command -v perf >/dev/null && d=$(make_cgroup "$CG2_ROOT" "$CG_PREFIX-perfprobe"); then
    perf stat -x, -a -e context-switches -G "${d#"$CG2_ROOT"/}" -- true >/dev/null 2>&1 && CS_METHOD=perf
    rmdir "$d"
fi
# server_groups NAME: the groups of server (or pgbench) NAME in CPUDIR,
# PERFNAME and CGS (all of its directories, for CG_EXEC).
server_groups() {
    local n=$1 cpu="" perf=""
    case "$CPU_METHOD" in
        cgroup) cpu=$(make_cgroup "$CG1_ROOT" "$CG_PREFIX-$n") ;;
        cgroup2) cpu=$(make_cgroup "$CG2_ROOT" "$CG_PREFIX-$n") ;;
    esac
    if [ "$CS_METHOD" = perf ] && [ "$n" != bench ]; then
        if [ "$CPU_METHOD" = cgroup2 ]; then perf=$cpu; else perf=$(make_cgroup "$CG2_ROOT" "$CG_PREFIX-$n"); fi
    fi
    CPUDIR[$n]=$cpu
    PERFNAME[$n]=${perf#"$CG2_ROOT"/}
    CGS[$n]="$cpu"
    [ -n "$perf" ] && [ "$perf" != "$cpu" ] && CGS[$n]="$cpu $perf"
    return 0
}
for n in $SERVERS bench; do
    server_groups "$n"
    CREATED_CGROUPS="$CREATED_CGROUPS ${CGS[$n]}"
done
PG_CGROUPS=${CGS[pg]} W_CGROUPS=${CGS[w]}

case "$CPU_METHOD" in
    cgroup) CPU_NOTE="cgroup v1 cpuacct, whole process tree incl. exited backends" ;;
    cgroup2) CPU_NOTE="cgroup2 cpu.stat, whole process tree incl. exited backends" ;;
    proc) CPU_NOTE="no cgroups: /proc of the live tree + children reaped (cutime); pgbench by rusage" ;;
esac
case "$CS_METHOD" in
    perf) CS_NOTE="perf stat -a -G (cgroup2), exited processes included" ;;
    none) CS_NOTE="not measured (perf -G on cgroup2 unavailable)" ;;
esac

pick_ports
B_PORT=$(rand_port)
while [ "$B_PORT" = "$PG_PORT" ] || [ "$B_PORT" = "$W_PORT" ]; do B_PORT=$(rand_port); done

# --- PostgreSQL cluster
PGDATA="$WORK/pgdata"
PGSOCK="$WORK/pgsock"
init_pg
start_pg() { # fsync synchronous_commit
    [ -e "$PGDATA/postmaster.pid" ] && { echo "error: a PostgreSQL server still runs on $PGDATA" >&2; exit 1; }
    launch_pg -c fsync="$1" -c synchronous_commit="$2"
}

# --- walshm servers (the binary under test, and the optional baseline)
WDATA="$WORK/walshm"
BDATA="$WORK/baseline"
init_walshm
[ -n "$BASELINE_BIN" ] && init_walshm "$BASELINE_BIN" "$BDATA" "$WORK/baseline-init.log"
walshm_ready() { [ -S "$WDATA/.s.PGSQL.$W_PORT" ] && "$PG_BINDIR/pg_isready" -q -h "$WDATA" -p "$W_PORT"; }
baseline_ready() { [ -S "$BDATA/.s.PGSQL.$B_PORT" ] && "$PG_BINDIR/pg_isready" -q -h "$BDATA" -p "$B_PORT"; }
# WALSHM_SETS / BASELINE_SETS: extra "NAME=VALUE ..." for the walshm and
# baseline servers (one binary, two settings: an A/B in one run).
sets_args() { local s; for s in $1; do printf -- '--set\n%s\n' "$s"; done; }
start_walshms() { # fsync synchronous_commit
    local wx bx; mapfile -t wx < <(sets_args "${WALSHM_SETS:-}"); mapfile -t bx < <(sets_args "${BASELINE_SETS:-}")
    launch_walshm walshm_ready --set fsync="$1" --set synchronous_commit="$2" "${wx[@]}"
    if [ -n "$BASELINE_BIN" ]; then
        spawn_walshm B_PID "$BASELINE_BIN" "$BDATA" "$B_PORT" "$WORK/baseline.log" "${CGS[b]}" \
            baseline_ready --set fsync="$1" --set synchronous_commit="$2" "${bx[@]}"
    fi
}
stop_walshms() { stop_walshm; stop_walshm_pid "$B_PID"; B_PID=""; }

declare -A HOST PORT USR LABEL
HOST[pg]=$PGSOCK PORT[pg]=$PG_PORT USR[pg]=$PG_USER LABEL[pg]=PG
HOST[w]=$WDATA PORT[w]=$W_PORT USR[w]=walshm LABEL[w]=walshm
HOST[b]=$BDATA PORT[b]=$B_PORT USR[b]=walshm LABEL[b]=baseline
root_pid() { case "$1" in pg) echo "$PG_PID" ;; w) echo "$W_PID" ;; b) echo "$B_PID" ;; esac; }

# --- pgbench scripts
printf '%s\n' "SELECT pg_logical_emit_message(false, 'test', repeat('x', 16));" >"$WORK/emit16.sql"
printf '%s\n' "SELECT txid_current();" >"$WORK/txid.sql"
printf '%s\n' "BEGIN;" "SELECT pg_logical_emit_message(true, 'test', repeat('x', 64));" "COMMIT;" >"$WORK/commit64.sql"
printf '%s\n' '\set n random(1, 1000000)' "SELECT pg_logical_emit_message(true, 'k', :n::text);" >"$WORK/autocommit.sql"
{
    echo "BEGIN;"
    echo "SELECT txid_current();"
    for _ in 1 2 3; do echo "SELECT pg_logical_emit_message(true, 'test', repeat('x', 64));"; done
    echo "COMMIT;"
} >"$WORK/multi.sql"
printf '%s\n' "SELECT 1;" >"$WORK/select1.sql"
chmod 644 "$WORK"/*.sql

# --- measurements
# proc_tree ROOT: ROOT and its live descendants' pids.
proc_tree() {
    ps -e -o pid=,ppid= | awk -v r="$1" '
        { kids[$2] = kids[$2] " " $1 }
        END { q[1] = r; n = 1
              for (i = 1; i <= n; i++) { print q[i]; m = split(kids[q[i]], k, " ")
                                         for (j = 1; j <= m; j++) q[++n] = k[j] } }'
}
# server_pids NAME: the processes of server NAME now.
server_pids() {
    if [ -n "${CPUDIR[$1]}" ]; then cat "${CPUDIR[$1]}/cgroup.procs"; else proc_tree "$(root_pid "$1")"; fi
}
CLK_TCK=$(getconf CLK_TCK)
# proc_cpu_ns PID...: utime+stime+cutime+cstime of the PIDs, in ns.
proc_cpu_ns() {
    local p ticks=0 t
    for p in "$@"; do
        t=$(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null | awk '{ print $12 + $13 + $14 + $15 }') || t=0
        ticks=$(( ticks + ${t:-0} ))
    done
    echo $(( ticks * 1000000000 / CLK_TCK ))
}
# group_cpu_ns NAME: CPU used so far by server (or pgbench group) NAME, ns.
group_cpu_ns() {
    case "$CPU_METHOD" in
        cgroup) cat "${CPUDIR[$1]}/cpuacct.usage" ;;
        cgroup2) awk '$1 == "usage_usec" { printf "%.0f\n", $2 * 1000 }' "${CPUDIR[$1]}/cpu.stat" ;;
        proc) if [ "$1" = bench ]; then echo 0; else mapfile -t pids < <(proc_tree "$(root_pid "$1")"); proc_cpu_ns "${pids[@]}"; fi ;;
    esac
}
# wait_idle NAME COUNT: until server NAME has at most COUNT processes (its
# connection backends have exited and flushed their statistics), 3 s at most.
wait_idle() {
    for _ in $(seq 1 60); do
        [ "$(server_pids "$1" | wc -l)" -le "$2" ] && return 0
        sleep 0.05
    done
}
# wal_sync NAME: pg_stat_wal.wal_sync of server NAME (empty if unavailable).
wal_sync() {
    "$PG_BINDIR/psql" -X -A -t -q -h "${HOST[$1]}" -p "${PORT[$1]}" -U "${USR[$1]}" -d postgres \
        -c "SELECT wal_sync FROM pg_stat_wal" 2>>"$WORK/psql-errors.log" || true
}
declare -A IDLE
# record_idle NAME: the process count of server NAME at rest.
record_idle() {
    wal_sync "$1" >/dev/null
    sleep 0.3
    IDLE[$1]=$(server_pids "$1" | wc -l)
}

NPROC=$(nproc)
# --- where the client is the limit: pgbench's wake-ups, shares
# of the machine, the limit word. POLL_EVENTS: the poll-family syscall
# tracepoints perf can count here (none: the poll column shows "-").
POLL_EVENTS=""
if command -v perf >/dev/null; then
    for e in ppoll poll select pselect6; do
        perf stat -x, -o /dev/null -e "syscalls:sys_enter_$e" -- true >/dev/null 2>&1 \
            && POLL_EVENTS="$POLL_EVENTS${POLL_EVENTS:+,}syscalls:sys_enter_$e"
    done
fi
# POLL_COUNTING: the prefix that runs a command under a perf stat counting
# its poll calls into WORK/polls.out (empty without POLL_EVENTS). It goes
# outside pgbench's cgroup: perf's own CPU is not charged to pgbench.
POLL_COUNTING=()
[ -n "$POLL_EVENTS" ] && POLL_COUNTING=(perf stat -x, -o "$WORK/polls.out" -e "$POLL_EVENTS" --)
# polls_counted: the poll calls counted by the last POLL_COUNTING run.
polls_counted() {
    [ -n "$POLL_EVENTS" ] || return 0
    awk -F, '$3 ~ /^syscalls:sys_enter_/ && $1 ~ /^[0-9]+$/ { n += $1; ok = 1 } END { if (ok) print n }' "$WORK/polls.out"
}
# cpu_share NS WALL_NS: NS of CPU as a share of the machine (0..1) over
# WALL_NS, "-" when unknown.
cpu_share() {
    awk -v a="$1" -v w="$2" -v n="$NPROC" 'BEGIN {
        if (a !~ /^-?[0-9]+$/ || w + 0 <= 0) print "-"; else printf "%.3f\n", a / (w * n) }'
}
# client_limit SRV_SHARE PGB_SHARE THREADS BUSY: "client" when pgbench's
# THREADS are >= 90% busy, or server and pgbench fill >= 90% of the machine
# and pgbench's share is at least the server's; "server" when they fill it
# and the server's share is larger; "others" when they do not, but the
# machine was >= 90% BUSY (a share, "-" if unknown: other processes took
# the CPU); "wait" otherwise; "-" when a share is unknown.
client_limit() {
    awk -v s="$1" -v p="$2" -v j="$3" -v b="$4" -v n="$NPROC" 'BEGIN {
        if (s !~ /^[0-9.]+$/ || p !~ /^[0-9.]+$/) { print "-"; exit }
        if (p * n >= 0.9 * j || (s + p >= 0.9 && p >= s)) print "client"
        else if (s + p >= 0.9) print "server"
        else if (b ~ /^[0-9.]+$/ && b >= 0.9) print "others"
        else print "wait" }'
}
# machine_jiffies: "BUSY TOTAL" CPU time of the whole machine so far
# (/proc/stat; busy = all but idle and iowait).
machine_jiffies() {
    awk '$1 == "cpu" { t = 0; for (i = 2; i <= NF; i++) t += $i; print t - $5 - $6, t; exit }' /proc/stat
}
# busy_share "BUSY0 TOTAL0" "BUSY1 TOTAL1": the machine's busy share between.
busy_share() {
    awk -v a="$1" -v b="$2" 'BEGIN { split(a, x, " "); split(b, y, " ")
        if (y[2] - x[2] <= 0) print "-"; else printf "%.3f\n", (y[1] - x[1]) / (y[2] - x[2]) }'
}
# percent SHARE: a 0..1 share in whole percent ("-" as it is).
percent() { awk -v x="$1" 'BEGIN { if (x !~ /^[0-9.]+$/) print x; else printf "%.0f", x * 100 }'; }

# measure NAME SCRIPT MODE CLIENTS: one pgbench run against server NAME;
# sets R_TPS R_TX R_SCPU R_PCPU R_CS R_FS and R_POLL R_SSHARE R_PSHARE
# R_LIMIT ("-" for what is unknown, R_TPS "fail" if pgbench failed).
measure() {
    local n=$1 script=$2 mode=$3 c=$4 j out fs0 fs1 s0 s1 p0 p1 m0 m1 cs="" extra=()
    j=$(( c < NPROC ? c : NPROC ))
    if [ "$mode" = connect ]; then mode=simple; extra=(-C); fi
    local cmd=("$PG_BINDIR/pgbench" -n -h "${HOST[$n]}" -p "${PORT[$n]}" -U "${USR[$n]}" -M "$mode"
        "${extra[@]}" -f "$WORK/$script.sql" -c "$c" -j "$j" -T "$SECONDS_PER_POINT" postgres)
    if [ "$CPU_METHOD" = proc ]; then
        cmd=(/usr/bin/time -f '%U %S' -o "$WORK/time.out" "${cmd[@]}")
    else
        cmd=("${CG_EXEC[@]}" "${CGS[bench]}" "${cmd[@]}")
    fi
    cmd=("${POLL_COUNTING[@]}" "${cmd[@]}")
    if [ "$CS_METHOD" = perf ]; then
        cmd=(perf stat -x, -o "$WORK/perf.out" -a -e context-switches -G "${PERFNAME[$n]}" -- "${cmd[@]}")
    fi
    fs0=$(wal_sync "$n")
    wait_idle "$n" "${IDLE[$n]}"
    s0=$(group_cpu_ns "$n") p0=$(group_cpu_ns bench) m0=$(machine_jiffies)
    if ! out=$("${cmd[@]}" 2>&1) || ! grep -q "number of failed transactions: 0 " <<<"$out"; then
        printf '%s %s %s c=%s:\n%s\n' "${LABEL[$n]}" "$script" "$mode" "$c" "$out" >>"$WORK/pgbench-failures.log"
        R_TPS=fail R_TX=0 R_SCPU=- R_PCPU=- R_CS=- R_FS=- R_POLL=- R_SSHARE=- R_PSHARE=- R_LIMIT=- R_BUSY=-
        return
    fi
    wait_idle "$n" "${IDLE[$n]}"
    m1=$(machine_jiffies) s1=$(group_cpu_ns "$n") p1=$(group_cpu_ns bench)
    fs1=$(wal_sync "$n")
    R_TPS=$(sed -n 's/^tps = \([0-9.]*\) (.*)$/\1/p' <<<"$out")
    R_TX=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*$/\1/p' <<<"$out")
    if [ "$CPU_METHOD" = proc ]; then
        p0=0 p1=$(awk '{ printf "%.0f\n", ($1 + $2) * 1e9 }' "$WORK/time.out")
    fi
    [ "$CS_METHOD" = perf ] && cs=$(awk -F, '$3 == "context-switches" { print $1 }' "$WORK/perf.out")
    R_SCPU=$(per_tx "$(( s1 - s0 ))" 1000 "$R_TX")
    R_PCPU=$(per_tx "$(( p1 - p0 ))" 1000 "$R_TX")
    R_CS=$(per_tx "$cs" 1 "$R_TX")
    if [ -n "$fs0" ] && [ -n "$fs1" ]; then R_FS=$(per_tx "$(( fs1 - fs0 ))" 1 "$R_TX"); else R_FS=-; fi
    R_BUSY=$(busy_share "$m0" "$m1")
    client_side "$(( s1 - s0 ))" "$(( p1 - p0 ))" "$(pgbench_wall_ns "$out")" "$j"
}
# pgbench_wall_ns OUTPUT: how long the pgbench run of OUTPUT took, ns: its
# transactions / tps plus its initial connection time (not perf's or the
# wrappers' start-up).
pgbench_wall_ns() {
    awk '/^number of transactions actually processed: / { tx = $6 }
         /^initial connection time = / { conn = $5 }
         /^tps = / { tps = $3 }
         END { if (tps + 0 > 0) printf "%.0f\n", (tx / tps + conn / 1000) * 1e9 }' <<<"$1"
}
# client_side SRV_NS PGB_NS WALL_NS THREADS: R_POLL R_SSHARE R_PSHARE R_LIMIT
# of the run just measured (R_TX transactions, machine busy share R_BUSY).
client_side() {
    R_POLL=$(per_tx "$(polls_counted)" 1 "$R_TX")
    R_SSHARE=$(cpu_share "$1" "$3")
    R_PSHARE=$(cpu_share "$2" "$3")
    [ "$CPU_METHOD" = proc ] && [ "$2" = 0 ] && R_PSHARE=-
    R_LIMIT=$(client_limit "$R_SSHARE" "$R_PSHARE" "$4" "$R_BUSY")
}
# per_tx AMOUNT UNIT TX: AMOUNT / UNIT / TX, or "-" when unknown.
per_tx() {
    awk -v a="$1" -v u="$2" -v t="$3" 'BEGIN {
        if (a !~ /^-?[0-9.]+$/ || t + 0 <= 0) print "-"; else printf "%.4f\n", a / u / t }'
}
# sig3 X: X with about three significant digits (or as it is, if not a number).
sig3() {
    awk -v x="$1" 'BEGIN { if (x !~ /^-?[0-9.]+$/) print x; else if (x >= 100) printf "%.0f", x;
        else if (x >= 10) printf "%.1f", x; else if (x >= 1) printf "%.2f", x; else printf "%.3f", x }'
}
# ratio A B: A / B with two decimals, "-" when unknown.
ratio() {
    awk -v a="$1" -v b="$2" 'BEGIN {
        if (a !~ /^[0-9.]+$/ || b !~ /^[0-9.]+$/ || b + 0 <= 0) print "-"; else printf "%.2f", a / b }'
}

if [ -n "$CSV" ]; then
    echo "durability,script,mode,clients,server,binary,seconds,tps,transactions,server_cpu_us_per_tx,pgbench_cpu_us_per_tx,ctx_switches_per_tx,fdatasyncs_per_tx,cpu_method,cs_method,pgbench_polls_per_tx,server_cpu_share,pgbench_cpu_share,limit,server_session,machine_busy_share" >"$CSV"
fi
binary_of() { case "$1" in pg) echo "$PG_BINDIR/postgres" ;; w) echo "$WALSHM_BIN" ;; b) echo "$BASELINE_BIN" ;; esac; }

echo "pg-vs-walshm: $(uname -srm), nproc=$NPROC, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "PostgreSQL: $("$PG_BINDIR/postgres" --version); walshm: $WALSHM_BIN${BASELINE_BIN:+; baseline: $BASELINE_BIN}"
echo "pgbench -n -T $SECONDS_PER_POINT, -j min(clients, nproc); max_connections=$MAX_CONN on all; durability on = fsync+synchronous_commit on"
echo "srvCPU = server CPU us/tx ($CPU_NOTE); pgbCPU = pgbench CPU us/tx"
echo "cs = server context switches/tx ($CS_NOTE); fsync = pg_stat_wal.wal_sync/tx"
echo "poll = pgbench poll calls/tx (${POLL_EVENTS:-not counted: no perf syscall tracepoints}); srv%, pgb% = share of the $NPROC CPUs; limit: client/server/others/wait (see --help)"
echo "servers in $SERVER_SESSION session(s) (autogroup scheduling: $(cat /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null || echo unknown))"
NPOINTS=0
for _ in $DURABILITY; do for _ in $POINTS; do for _ in $CLIENTS; do NPOINTS=$(( NPOINTS + 1 )); done; done; done
NSERVERS=$(wc -w <<<"$SERVERS")
echo "$NPOINTS points x $NSERVERS servers x $SECONDS_PER_POINT s = $(( NPOINTS * NSERVERS * SECONDS_PER_POINT )) s of pgbench (plus ~1 s per run for set-up and statistics)"
echo "w/PG = walshm/PG tps, PG/w = PG/walshm srvCPU${BASELINE_BIN:+; w/b = walshm/baseline tps, b/w = baseline/walshm srvCPU}; all per whole run incl. connection set-up"
echo
BLOCK='%7s %6s %6s %5s %5s %5s %4s %4s %-6s'
line="$(printf '%-10s %-8s %-3s %4s' "" "" "" "")"
for n in $SERVERS; do line="$line |$(printf ' %-56s' "${LABEL[$n]}")"; done
echo "${line%"${line##*[! ]}"}"
line="$(printf '%-10s %-8s %-3s %4s' script mode dur cl)"
for n in $SERVERS; do line="$line |$(printf "$BLOCK" tps srvCPU pgbCPU cs fsync poll srv% pgb% limit)"; done
line="$line |$(printf '%5s %5s' w/PG PG/w)"
[ -n "$BASELINE_BIN" ] && line="$line $(printf '%5s %5s' w/b b/w)"
echo "$line"

declare -A TPS SCPU
for dur in $DURABILITY; do
    start_pg "$dur" "$dur"
    start_walshms "$dur" "$dur"
    for n in $SERVERS; do record_idle "$n"; done
    for point in $POINTS; do
        script=${point%%:*} mode=${point#*:}
        for c in $CLIENTS; do
            line="$(printf '%-10s %-8s %-3s %4s' "$script" "$mode" "$dur" "$c")"
            for n in $SERVERS; do
                measure "$n" "$script" "$mode" "$c"
                TPS[$n]=$R_TPS SCPU[$n]=$R_SCPU
                tps_shown=$R_TPS
                [ "$R_TPS" != fail ] && tps_shown=$(printf '%.0f' "$R_TPS")
                line="$line |$(printf "$BLOCK" "$tps_shown" "$(sig3 "$R_SCPU")" "$(sig3 "$R_PCPU")" \
                    "$(sig3 "$R_CS")" "$(sig3 "$R_FS")" "$(sig3 "$R_POLL")" "$(percent "$R_SSHARE")" \
                    "$(percent "$R_PSHARE")" "$R_LIMIT")"
                if [ -n "$CSV" ]; then
                    echo "$dur,$script,$mode,$c,${LABEL[$n]},$(binary_of "$n"),$SECONDS_PER_POINT,$R_TPS,$R_TX,$R_SCPU,$R_PCPU,$R_CS,$R_FS,$CPU_METHOD,$CS_METHOD,$R_POLL,$R_SSHARE,$R_PSHARE,$R_LIMIT,$SERVER_SESSION,$R_BUSY" >>"$CSV"
                fi
            done
            line="$line |$(printf '%5s %5s' "$(ratio "${TPS[w]}" "${TPS[pg]}")" "$(ratio "${SCPU[pg]}" "${SCPU[w]}")")"
            if [ -n "$BASELINE_BIN" ]; then
                line="$line $(printf '%5s %5s' "$(ratio "${TPS[w]}" "${TPS[b]}")" "$(ratio "${SCPU[b]}" "${SCPU[w]}")")"
            fi
            echo "$line"
        done
    done
    stop_pg
    stop_walshms
done
if [ -s "$WORK/pgbench-failures.log" ]; then
    echo
    echo "pgbench failures:"
    cat "$WORK/pgbench-failures.log"
    exit 1
fi
