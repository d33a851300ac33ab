# lib-servers.sh: shell functions shared by pg-vs-walshm.sh and
# replication-bench.sh (sourced, not run): finding the binaries, starting a
# temporary PostgreSQL 15 cluster and walshm server on Unix sockets, waiting
# for them, and stopping them again. The caller sets ROOT, WORK, MAX_CONN,
# PGDATA, PGSOCK, WDATA and PG_PID="" PG_LAUNCHER="" W_PID="" as it needs.

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
        as_pg() { runuser -u postgres -- "$@"; }
        PG_USER=postgres
    else
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

stop_walshm() {
    if [ -n "$W_PID" ] && kill -0 "$W_PID" 2>/dev/null; then
        kill -TERM "$W_PID" 2>/dev/null || true   # fast shutdown
        for _ in $(seq 1 300); do kill -0 "$W_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL -- "-$W_PID" 2>/dev/null || true
        wait "$W_PID" 2>/dev/null || true
    fi
    W_PID=""
}

# cleanup: stops the receiver (stop_rx, where the caller has one), both
# servers, and removes WORK; run on exit.
cleanup() {
    if declare -F stop_rx >/dev/null; then stop_rx; fi
    stop_pg
    stop_walshm
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
    as_pg "$PG_BINDIR/postgres" -D "$PGDATA" -c port="$PG_PORT" -c listen_addresses='' \
        -c unix_socket_directories="$PGSOCK" -c max_connections="$MAX_CONN" \
        "$@" >>"$WORK/pg.log" 2>&1 &
    PG_LAUNCHER=$!
    for _ in $(seq 1 300); do
        [ -z "$PG_PID" ] && [ -s "$PGDATA/postmaster.pid" ] && PG_PID=$(head -n1 "$PGDATA/postmaster.pid")
        [ -n "$PG_PID" ] && "$PG_BINDIR/pg_isready" -q -h "$PGSOCK" -p "$PG_PORT" && return 0
        kill -0 "$PG_LAUNCHER" 2>/dev/null || break
        sleep 0.1
    done
    echo "error: PostgreSQL did not start" >&2; cat "$WORK/pg.log" >&2; exit 1
}

# init_walshm: a walshm data directory in WDATA.
init_walshm() {
    "$WALSHM_BIN" init -D "$WDATA" >"$WORK/walshm-init.log" 2>&1 \
        || { cat "$WORK/walshm-init.log" >&2; exit 1; }
}

# launch_walshm READY ARGS...: walshm on WDATA/W_PORT with MAX_CONN and the
# extra ARGS, logging to WORK/walshm.log, in its own process group; returns
# once the command READY succeeds, or exits.
launch_walshm() {
    local ready=$1; shift
    : >"$WORK/walshm.log"
    setsid "$WALSHM_BIN" start -D "$WDATA" --set port="$W_PORT" --set max_connections="$MAX_CONN" \
        "$@" >>"$WORK/walshm.log" 2>&1 &
    W_PID=$!
    for _ in $(seq 1 300); do
        "$ready" && return 0
        kill -0 "$W_PID" 2>/dev/null || break
        sleep 0.1
    done
    echo "error: walshm did not start" >&2; cat "$WORK/walshm.log" >&2; exit 1
}
