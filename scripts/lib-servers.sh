# lib-servers.sh: shell functions shared by pg-vs-walshm.sh and
# replication-bench.sh (sourced, not run): finding the binaries, starting a
# temporary PostgreSQL 15 cluster and walshm server on Unix sockets, waiting
# for them, and stopping them again. The caller sets ROOT, WORK, MAX_CONN,
# PGDATA, PGSOCK, WDATA and PG_PID="" PG_LAUNCHER="" W_PID="" as it needs;
# optionally PG_CGROUPS / W_CGROUPS: cgroup directories (space-separated)
# each server's process tree is started in, so its CPU can be accounted,
# and SERVER_SESSION (see run_server_bg).

# CG_EXEC "DIR..." CMD...: runs CMD (exec, same pid) after moving itself into
# every cgroup directory DIR (none: CMD runs where it is). Works in the
# foreground, in the background (&) and under setsid/perf.
CG_EXEC=(bash -c 'for d in $1; do echo $$ >"$d/cgroup.procs" || exit 1; done; shift; exec "$@"' cg_exec)

# run_server_bg VAR LOG CMD...: starts CMD in the background, its output
# appended to LOG, and puts its pid (a process group leader) into VAR.
# SERVER_SESSION=own (default): CMD runs in a session of its own (setsid),
# as a server started as a service does; with the kernel's autogroup
# scheduling (/proc/sys/kernel/sched_autogroup_enabled) it is then also a
# scheduling group of its own, weighed against this script's session (where
# pgbench runs) as one entity. SERVER_SESSION=shared: CMD stays in this
# script's session (its own process group only), so its processes and
# pgbench's threads are scheduled as peers. Every server of a run is started
# the same way: the placement changes how often pgbench wakes up per reply,
# so a comparison must not mix them.
run_server_bg() {
    local var=$1 log=$2 pid; shift 2
    if [ "${SERVER_SESSION:-own}" = shared ]; then
        set -m   # job control: the background job gets its own process group
        "$@" >>"$log" 2>&1 &
        pid=$!
        set +m
    else
        setsid "$@" >>"$log" 2>&1 &
        pid=$!
    fi
    printf -v "$var" '%s' "$pid"
}

# need_pg_tools NAME...: every NAME is in PG_BINDIR (default PG 15's), or exit.
need_pg_tools() {
    PG_BINDIR="${PG_BINDIR:-/usr/lib/postgresql/15/bin}"
    local p
    for p in "$@"; do
        [ -x "$PG_BINDIR/$p" ] || { echo "error: $PG_BINDIR/$p not found (apt-get install postgresql-15)" >&2; exit 1; }
    done
}

# find_walshm: WALSHM_BIN (default target/release/postmaster, built if missing).
find_walshm() {
    WALSHM_BIN="${WALSHM_BIN:-$ROOT/target/release/postmaster}"
    if [ ! -x "$WALSHM_BIN" ]; then
        echo "building walshm (cargo build --release) ..." >&2
        (cd "$ROOT" && cargo build --release --bin postmaster >&2)
        WALSHM_BIN="$ROOT/target/release/postmaster"
    fi
}

# pg_user: as_pg CMD... and PG_USER. As root, PostgreSQL must run as another user.
pg_user() {
    if [ "$(id -u)" = 0 ]; then
        id postgres >/dev/null 2>&1 || { echo "error: no 'postgres' user to run PostgreSQL as" >&2; exit 1; }
        PG_AS=(runuser -u postgres --)
        as_pg() { runuser -u postgres -- "$@"; }
        PG_USER=postgres
    else
        PG_AS=()
        as_pg() { "$@"; }
        PG_USER="$(id -un)"
    fi
}

# stop_pg: fast shutdown, then (with PG_STOP_QUIT=1) immediate shutdown,
# then SIGKILL. PG_PID is the postmaster itself (from postmaster.pid), not runuser.
stop_pg() {
    if [ -n "$PG_PID" ] && kill -0 "$PG_PID" 2>/dev/null; then
        kill -INT "$PG_PID" 2>/dev/null || true   # fast shutdown
        for _ in $(seq 1 300); do kill -0 "$PG_PID" 2>/dev/null || break; sleep 0.1; done
        if [ "${PG_STOP_QUIT:-0}" = 1 ]; then
            kill -QUIT "$PG_PID" 2>/dev/null || true  # immediate shutdown
            for _ in $(seq 1 50); do kill -0 "$PG_PID" 2>/dev/null || break; sleep 0.1; done
        fi
        kill -KILL "$PG_PID" 2>/dev/null || true
    fi
    if [ -n "$PG_LAUNCHER" ]; then
        kill -KILL "$PG_LAUNCHER" 2>/dev/null || true
        wait "$PG_LAUNCHER" 2>/dev/null || true
    fi
    PG_PID="" PG_LAUNCHER=""
}

# stop_walshm_pid PID: fast shutdown of the walshm postmaster PID (a process
# group leader), then SIGKILL to its whole group.
stop_walshm_pid() {
    local pid=$1
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true   # fast shutdown
        for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL -- "-$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
}
stop_walshm() {
    stop_walshm_pid "$W_PID"
    W_PID=""
}

# cleanup: stops the receiver (stop_rx, where the caller has one), both
# servers, runs the caller's cleanup_extra (if any: more servers, cgroups)
# and removes WORK; run on exit.
cleanup() {
    if declare -F stop_rx >/dev/null; then stop_rx; fi
    stop_pg
    stop_walshm
    if declare -F cleanup_extra >/dev/null; then cleanup_extra; fi
    rm -rf "$WORK"
}
trap_cleanup() {
    trap cleanup EXIT
    trap 'exit 130' INT TERM
}

# pick_ports: PG_PORT and W_PORT, two different port numbers that no Unix
# socket in our directories uses yet; the servers listen on Unix sockets
# only, so TCP ports are not touched.
rand_port() { echo $(( 20000 + (RANDOM * 32768 + RANDOM) % 40000 )); }
pick_ports() {
    PG_PORT=$(rand_port)
    W_PORT=$(rand_port)
    while [ "$W_PORT" = "$PG_PORT" ]; do W_PORT=$(rand_port); done
}

# init_pg: a PostgreSQL cluster in PGDATA, its socket directory PGSOCK.
init_pg() {
    mkdir -p "$PGDATA" "$PGSOCK"
    [ "$(id -u)" = 0 ] && chown "$PG_USER" "$PGDATA" "$PGSOCK"
    as_pg "$PG_BINDIR/initdb" -D "$PGDATA" -U "$PG_USER" --auth-local=trust --auth-host=reject \
        -E UTF8 --no-sync >"$WORK/initdb.log" 2>&1 \
        || { cat "$WORK/initdb.log" >&2; exit 1; }
}

# launch_pg ARGS...: postgres on PGDATA/PGSOCK/PG_PORT with MAX_CONN and
# the extra ARGS (-c name=value), logging to WORK/pg.log; returns once it
# accepts connections, or exits.
launch_pg() {
    : >"$WORK/pg.log"
    [ "$(id -u)" = 0 ] && chown "$PG_USER" "$WORK/pg.log"
    run_server_bg PG_LAUNCHER "$WORK/pg.log" "${CG_EXEC[@]}" "${PG_CGROUPS:-}" "${PG_AS[@]}" \
        "$PG_BINDIR/postgres" -D "$PGDATA" -c port="$PG_PORT" -c listen_addresses='' \
        -c unix_socket_directories="$PGSOCK" -c max_connections="$MAX_CONN" "$@"
    for _ in $(seq 1 300); do
        [ -z "$PG_PID" ] && [ -s "$PGDATA/postmaster.pid" ] && PG_PID=$(head -n1 "$PGDATA/postmaster.pid")
        [ -n "$PG_PID" ] && "$PG_BINDIR/pg_isready" -q -h "$PGSOCK" -p "$PG_PORT" && return 0
        kill -0 "$PG_LAUNCHER" 2>/dev/null || break
        sleep 0.1
    done
    echo "error: PostgreSQL did not start" >&2; cat "$WORK/pg.log" >&2; exit 1
}

# init_walshm [BIN DIR LOG]: a walshm data directory (default WDATA, made by
# WALSHM_BIN, logging to WORK/walshm-init.log).
init_walshm() {
    local bin=${1:-$WALSHM_BIN} dir=${2:-$WDATA} log=${3:-$WORK/walshm-init.log}
    "$bin" init -D "$dir" >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
}

# launch_walshm READY ARGS...: walshm on WDATA/W_PORT with MAX_CONN and the
# extra ARGS, logging to WORK/walshm.log, in its own process group (and in
# the cgroups W_CGROUPS; session: run_server_bg); returns once the command
# READY succeeds, or exits.
launch_walshm() {
    local ready=$1; shift
    spawn_walshm W_PID "$WALSHM_BIN" "$WDATA" "$W_PORT" "$WORK/walshm.log" "${W_CGROUPS:-}" "$ready" "$@"
}

# spawn_walshm VAR BIN DIR PORT LOG "CGROUP..." READY ARGS...: the general
# form of launch_walshm, also for a second walshm server; its pid goes into
# the variable VAR before waiting, so the caller's cleanup can stop a server
# that failed to come up.
spawn_walshm() {
    local var=$1 bin=$2 dir=$3 port=$4 log=$5 cgroups=$6 ready=$7 pid; shift 7
    : >"$log"
    run_server_bg "$var" "$log" "${CG_EXEC[@]}" "$cgroups" "$bin" start -D "$dir" \
        --set port="$port" --set max_connections="$MAX_CONN" "$@"
    pid=${!var}
    for _ in $(seq 1 300); do
        "$ready" && return 0
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    echo "error: walshm ($bin) did not start" >&2; cat "$log" >&2; exit 1
}
