#!/usr/bin/env python3
"""pgoutput-consume.py DSN SLOT PUBLICATION OUTFILE

Streams an existing logical slot with psycopg2's LogicalReplicationConnection
and the pgoutput plugin (proto_version 1, messages true) and appends the
content of every message it receives to OUTFILE, one line each (written and
fsynced before the message is confirmed with send_feedback, so a message is
confirmed only once it is on disk here). Runs until the connection ends
(exit 3) or it is killed; tests/replication/logical.rs runs it across a kill -9 of the
server and starts it again, which resumes from the slot.
"""
import os
import select
import struct
import sys

import psycopg2
import psycopg2.extras


def content(payload):
    if chr(payload[0]) != "M":
        return None
    end = payload.index(b"\0", 10)
    (size,) = struct.unpack("!I", payload[end + 1:end + 5])
    return payload[end + 5:end + 5 + size]


def main():
    dsn, slot, publication, path = sys.argv[1:5]
    repl = psycopg2.connect(
        dsn, connection_factory=psycopg2.extras.LogicalReplicationConnection
    )
    cur = repl.cursor()
    cur.start_replication(
        slot_name=slot,
        decode=False,
        options={"proto_version": "1", "publication_names": publication, "messages": "true"},
    )
    with open(path, "ab") as out:
        while True:
            try:
                msg = cur.read_message()
            except psycopg2.Error as e:
                print(f"connection ended: {e}", file=sys.stderr)
                return 3
            if msg is None:
                try:
                    select.select([cur], [], [], 1.0)
                except (OSError, ValueError):
                    return 3
                continue
            text = content(msg.payload)
            if text is not None:
                out.write(text + b"\n")
                out.flush()
                os.fsync(out.fileno())
            msg.cursor.send_feedback(flush_lsn=msg.data_start)


if __name__ == "__main__":
    sys.exit(main())
