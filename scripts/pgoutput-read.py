#!/usr/bin/env python3
"""pgoutput-read.py DSN SQLFILE

Reads messages through logical decoding with psycopg2's
LogicalReplicationConnection and the pgoutput plugin (proto_version 1,
messages true): creates publication cmp_pub and slot cmp_pgoutput, starts
streaming, runs SQLFILE's statements one by one on a second connection,
and prints one line per pgoutput message until a message with content
'end' arrives: "BEGIN", "MESSAGE t|n PREFIX CONTENT", "COMMIT", or
"OTHER <type>". Positions, XIDs and times are left out (they differ
between servers); each message is confirmed (send_feedback) as it is
read. Exits 1 if 'end' does not arrive within 30 s. Used by
scripts/logical-vs-pg.sh against PostgreSQL 15 and walshm alike.
"""
import select
import struct
import sys
import time

import psycopg2
import psycopg2.extras


def statements(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    return [s.strip() for s in text.split(";\n") if s.strip()]


def describe(payload):
    kind = chr(payload[0])
    if kind == "B":
        return "BEGIN", False
    if kind == "C":
        return "COMMIT", False
    if kind == "M":
        flags = payload[1]
        end = payload.index(b"\0", 10)
        prefix = payload[10:end].decode()
        (size,) = struct.unpack("!I", payload[end + 1:end + 5])
        content = payload[end + 5:end + 5 + size].decode()
        return f"MESSAGE {'t' if flags & 1 else 'n'} {prefix} {content}", content == "end"
    return f"OTHER {kind}", False


def main():
    dsn, sqlfile = sys.argv[1], sys.argv[2]
    normal = psycopg2.connect(dsn)
    normal.autocommit = True
    cur = normal.cursor()
    cur.execute("DROP PUBLICATION IF EXISTS cmp_pub")
    cur.execute("CREATE PUBLICATION cmp_pub FOR ALL TABLES")
    repl = psycopg2.connect(
        dsn, connection_factory=psycopg2.extras.LogicalReplicationConnection
    )
    rc = repl.cursor()
    rc.create_replication_slot("cmp_pgoutput", output_plugin="pgoutput")
    rc.start_replication(
        slot_name="cmp_pgoutput",
        decode=False,
        options={"proto_version": "1", "publication_names": "cmp_pub", "messages": "true"},
    )
    for stmt in statements(sqlfile):
        cur.execute(stmt)
    deadline = time.monotonic() + 30
    done = False
    while not done:
        if time.monotonic() > deadline:
            print("timed out waiting for 'end'", file=sys.stderr)
            return 1
        msg = rc.read_message()
        if msg is None:
            select.select([rc], [], [], 1.0)
            continue
        line, done = describe(msg.payload)
        print(line, flush=True)
        msg.cursor.send_feedback(flush_lsn=msg.data_start)
    repl.close()
    for _ in range(100):
        try:
            cur.execute("SELECT pg_drop_replication_slot('cmp_pgoutput')")
            break
        except psycopg2.Error:
            time.sleep(0.1)
    cur.execute("DROP PUBLICATION cmp_pub")
    return 0


if __name__ == "__main__":
    sys.exit(main())
