#!/usr/bin/env python3
"""What the death of one attached process costs the others.

Runs, for each victim kind, a server with BYSTANDERS library workers
committing transactions (the worker library's example producer, --tx,
fsync off so that they are CPU-bound) and one victim, killed with SIGKILL
KILL_AT seconds in:

  none   no victim (the reference run)
  idle   a worker attached and idle between calls (walshm-probe)
  busy   a worker emitting messages in a tight loop (the producer)

The bystanders' commits per second are counted from the COMMIT records'
timestamps in the WAL (pg_waldump), over the second that starts at the
kill, and over the second two seconds before it (the same run's
baseline). Bystanders re-attach after a crash restart (--reattach), so a
restart shows as a gap, not as an end.

Usage: scripts/death-bench.py [--bin DIR] [--seconds S] [--kill-at T]
                              [--bystanders N] [--runs R]
  DIR: where postmaster, walshm-probe and examples/producer are
  (default target/release). Needs PostgreSQL 15's pg_waldump.
"""
import argparse
import datetime
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

PG_WALDUMP = os.environ.get("PG_WALDUMP", "/usr/lib/postgresql/15/bin/pg_waldump")


def commit_times(pg_wal):
    """Unix times of every COMMIT record in pg_wal."""
    segs = sorted(f for f in os.listdir(pg_wal) if len(f) == 24)
    out = subprocess.run([PG_WALDUMP, "-p", pg_wal, "-r", "Transaction", segs[0], segs[-1]],
                         capture_output=True, text=True).stdout
    times = []
    for line in out.splitlines():
        if "desc: COMMIT " not in line:
            continue
        stamp = line.split("desc: COMMIT ", 1)[1].strip()
        stamp = stamp.replace(" UTC", "+00:00")
        times.append(datetime.datetime.fromisoformat(stamp).timestamp())
    return times


def one_run(bin_dir, victim, seconds, kill_at, bystanders):
    """(commits/s in the second of the kill, in the baseline second,
    server restarted?)."""
    tmp = tempfile.mkdtemp(prefix="death-bench-")
    data = os.path.join(tmp, "data")
    pm = os.path.join(bin_dir, "postmaster")
    producer = os.path.join(bin_dir, "examples", "producer")
    probe = os.path.join(bin_dir, "walshm-probe")
    subprocess.run([pm, "init", "-D", data, "--set", "fsync=off",
                    "--set", "wal_keep_size=100000"], check=True,
                   stdout=subprocess.DEVNULL)
    log = open(os.path.join(tmp, "server.log"), "w")
    server = subprocess.Popen([pm, "start", "-D", data], stdout=log,
                              stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 30
        while "ready to accept connections" not in open(log.name).read():
            if time.time() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.05)
        by = [subprocess.Popen([producer, "-D", data, "--tx", "--reattach",
                                "--seconds", str(seconds), "--prefix", "b"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
              for _ in range(bystanders)]
        v = None
        if victim == "idle":
            v = subprocess.Popen([probe, "attach", "-D", data, "--until-stdin-eof"],
                                 stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
        elif victim == "busy":
            v = subprocess.Popen([producer, "-D", data, "--seconds", str(seconds),
                                  "--prefix", "v"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(kill_at)
        t_kill = time.time()
        if v is not None:
            v.send_signal(signal.SIGKILL)
            v.wait()
        for p in by:
            p.wait(timeout=seconds + 60)
        server.send_signal(signal.SIGINT)
        server.wait(timeout=60)
        text = open(log.name).read()
        restarted = "terminating any other active server processes" in text
        times = commit_times(os.path.join(data, "pg_wal"))
        in_kill = sum(1 for t in times if t_kill <= t < t_kill + 1)
        base = sum(1 for t in times if t_kill - 2 <= t < t_kill - 1)
        return in_kill, base, restarted
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="target/release")
    ap.add_argument("--seconds", type=float, default=6)
    ap.add_argument("--kill-at", type=float, default=3)
    ap.add_argument("--bystanders", type=int, default=3)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    if not os.path.isfile(PG_WALDUMP):
        sys.exit(f"pg_waldump not found at {PG_WALDUMP} (set PG_WALDUMP)")
    print(f"{'victim':<6} {'kill-second commits/s':>22} {'baseline/s':>11} {'ratio':>6}  restarts")
    for victim in ["none", "idle", "busy"]:
        rows = [one_run(a.bin, victim, a.seconds, a.kill_at, a.bystanders)
                for _ in range(a.runs)]
        k = statistics.median(r[0] for r in rows)
        b = statistics.median(r[1] for r in rows)
        restarts = sum(1 for r in rows if r[2])
        print(f"{victim:<6} {k:>22.0f} {b:>11.0f} {k / max(b, 1):>6.2f}  {restarts}/{len(rows)}")


if __name__ == "__main__":
    main()
