#!/usr/bin/env bash
#! logical-vs-pg.sh: reads the same committed, aborted, transactional and
#! non-transactional messages through logical decoding from a temporary
#! PostgreSQL 15 cluster and a temporary walshm server with unmodified
#! clients, and compares what they print once XIDs, LSNs and times are
#! normalized:
#!   - pg_recvlogical with test_decoding, default options and
#!     include-xids=0 + skip-empty-xacts=1 + include-timestamp=1;
#!   - psycopg2's LogicalReplicationConnection with pgoutput
#!     (proto_version 1, messages true), when PYTHON (default python3) can
#!     import psycopg2 (else that part is skipped, or with
#!     WALSHM_REQUIRE_PG=1 the script fails).
#! Exit 0 when every output matches PostgreSQL's, 1 when one differs.
#!
#! Usage: scripts/logical-vs-pg.sh [--out DIR]
#!   --out DIR  keep the outputs there (PLAN.pg.txt, PLAN.walshm.txt per
#!              plan, normalized); default: a temporary directory, removed
#! Environment: WALSHM_BIN (default target/release/postmaster, built if
#! missing), PG_BINDIR (default /usr/lib/postgresql/15/bin), PYTHON.
#! As root, PostgreSQL runs as the `postgres` user.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
. "$ROOT/scripts/lib-servers.sh"

OUT=""
while [ $# -gt 0 ]; do
    case "$1" in
        --out) OUT="$2"; shift 2 ;;
        -h|--help) sed -n 's/^#! \{0,1\}//p' "$0"; exit 0 ;;
        *) echo "error: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done

need_pg_tools initdb postgres pg_isready psql pg_recvlogical
find_walshm
WORK="$(mktemp -d "${TMPDIR:-/tmp}/logical-vs-pg.XXXXXX")"
chmod 755 "$WORK"
OUT="${OUT:-$WORK/out}"
mkdir -p "$OUT"
PGDATA="$WORK/pg" PGSOCK="$WORK/pgsock" WDATA="$WORK/walshm" MAX_CONN=20
PG_PID="" PG_LAUNCHER="" W_PID="" RX=""
stop_rx() { if [ -n "$RX" ]; then kill -KILL "$RX" 2>/dev/null || true; wait "$RX" 2>/dev/null || true; RX=""; fi; }
pg_user
trap_cleanup
pick_ports

init_pg
launch_pg -c wal_level=logical -c max_replication_slots=8 -c max_wal_senders=8 -c autovacuum=off
init_walshm
walshm_ready() { [ -S "$WDATA/.s.PGSQL.$W_PORT" ] && "$PG_BINDIR/pg_isready" -q -h "$WDATA" -p "$W_PORT"; }
launch_walshm walshm_ready

# Connection options per server: host (socket directory), port, user.
conn() {
    case "$1" in
        pg) echo "-h $PGSOCK -p $PG_PORT -U $PG_USER" ;;
        walshm) echo "-h $WDATA -p $W_PORT" ;;
    esac
}

# The messages every plan reads: committed (alone and two in a block with
# a non-transactional one between them), aborted, and a last
# non-transactional 'end' that tells the reader it has everything.
cat >"$WORK/messages.sql" <<'SQL'
SELECT pg_logical_emit_message(true, 'app', 'committed one');
BEGIN;
SELECT pg_logical_emit_message(true, 'app', 'two a');
SELECT pg_logical_emit_message(false, 'app', 'non-transactional inside');
SELECT pg_logical_emit_message(true, 'other', 'two b');
COMMIT;
BEGIN;
SELECT pg_logical_emit_message(true, 'app', 'aborted');
ROLLBACK;
SELECT pg_logical_emit_message(false, 'app', 'outside');
SELECT pg_logical_emit_message(true, 'app', 'ünïcödé');
SELECT pg_logical_emit_message(false, 'app', 'end');
SQL

normalize() {
    sed -E -e 's/^(BEGIN|COMMIT) [0-9]+/\1 XID/' -e 's/ \(at [^)]*\)/ (at TIME)/'
}

# recvlogical SERVER PLAN OPTIONS...: slot, stream, messages, wait for 'end'.
recvlogical() {
    local server=$1 plan=$2; shift 2
    local slot="cmp_${plan//-/_}" raw="$WORK/$plan.$server.raw"
    # shellcheck disable=SC2046
    "$PG_BINDIR/pg_recvlogical" $(conn "$server") -d postgres -S "$slot" --create-slot -P test_decoding
    : >"$raw"
    # shellcheck disable=SC2046
    "$PG_BINDIR/pg_recvlogical" $(conn "$server") -d postgres -S "$slot" --start --no-loop \
        -s 1 -F 0 -f "$raw" "$@" 2>>"$WORK/recvlogical.log" &
    RX=$!
    sleep 0.5
    # shellcheck disable=SC2046
    "$PG_BINDIR/psql" $(conn "$server") -d postgres -X -q -v ON_ERROR_STOP=1 -f "$WORK/messages.sql" >/dev/null
    for _ in $(seq 1 200); do
        grep -q 'content:end$' "$raw" && break
        sleep 0.1
    done
    kill -INT "$RX" 2>/dev/null || true
    wait "$RX" 2>/dev/null || true
    RX=""
    normalize <"$raw" >"$OUT/$plan.$server.txt"
    # shellcheck disable=SC2046
    "$PG_BINDIR/pg_recvlogical" $(conn "$server") -d postgres -S "$slot" --drop-slot
}

# pgoutput SERVER: psycopg2 with pgoutput.
pgoutput() {
    local server=$1 dsn
    case "$server" in
        pg) dsn="host=$PGSOCK port=$PG_PORT user=$PG_USER dbname=postgres" ;;
        walshm) dsn="host=$WDATA port=$W_PORT dbname=postgres" ;;
    esac
    "$PYTHON" "$ROOT/scripts/pgoutput-read.py" "$dsn" "$WORK/messages.sql" >"$OUT/pgoutput.$server.txt"
}

status=0
compare() {
    local plan=$1
    if [ ! -s "$OUT/$plan.pg.txt" ]; then
        echo "error: PostgreSQL printed nothing for $plan" >&2; status=1; return
    fi
    if diff -u "$OUT/$plan.pg.txt" "$OUT/$plan.walshm.txt"; then
        echo "$plan: same output as PostgreSQL 15 ($(wc -l <"$OUT/$plan.pg.txt") lines)"
    else
        echo "$plan: walshm differs from PostgreSQL 15 (above)" >&2; status=1
    fi
}

for server in pg walshm; do
    recvlogical "$server" default
    recvlogical "$server" options -o include-xids=0 -o skip-empty-xacts=1 -o include-timestamp=1
done
compare default
compare options

PYTHON="${PYTHON:-python3}"
if "$PYTHON" -c 'import psycopg2' 2>/dev/null; then
    for server in pg walshm; do pgoutput "$server"; done
    compare pgoutput
elif [ "${WALSHM_REQUIRE_PG:-0}" = 1 ]; then
    echo "error: $PYTHON cannot import psycopg2 (WALSHM_REQUIRE_PG=1)" >&2; status=1
else
    echo "SKIP pgoutput: $PYTHON cannot import psycopg2 (pip install psycopg2-binary)" >&2
fi
exit $status
