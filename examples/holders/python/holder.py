#!/usr/bin/python3
"""A holder of the fencing lab in Python: seed 004's lease client and its fenced write, speaking
the holder protocol (docs/holder-protocol.md) so that the lab can freeze, kill and slow it like
its own. Run by the lab:

    ./run.sh --holder-cmd examples/holders/python/holder.py --only F4,F5,F10

One timeline: acquire the lease (by the database's clock) → renew in a background thread → the
local-deadline check → stand at the write point until GO → write, fenced by the token → renew
once → release if asked → exit with the status that says how it went. Needs Debian's
python3-psycopg (scripts/ensure-python-holder.sh). With --loop-seed it runs the looping form
that lab chaos drives (`lab chaos --holder-cmd examples/holders/python/holder.py`). Not
implemented: the other stores (`--store`): asked for them, it exits 2.
"""
import argparse
import ctypes
import os
import random
import sys
import threading
import time

import psycopg

VERSION = 5
# Exit statuses (docs/holder-protocol.md).
WROTE, FAILURE, USAGE, LEASE_LOST, REJECTED, NOT_ACQUIRED, ORPHANED, PROTOCOL, DEADLINE = range(9)

ACQUIRE = """
INSERT INTO lease AS l (name, holder, token, expires_at)
VALUES (%(name)s, %(holder)s, 1, now() + make_interval(secs => %(ttl_ms)s::float8 / 1000))
ON CONFLICT (name) DO UPDATE
   SET holder = EXCLUDED.holder, token = l.token + 1, expires_at = EXCLUDED.expires_at
 WHERE l.expires_at <= now()
RETURNING l.token"""
RENEW = """
UPDATE lease SET expires_at = now() + make_interval(secs => %(ttl_ms)s::float8 / 1000)
 WHERE name = %(name)s AND holder = %(holder)s AND token = %(token)s AND expires_at > now()"""
RELEASE = """
UPDATE lease SET expires_at = '-infinity'
 WHERE name = %(name)s AND holder = %(holder)s AND token = %(token)s"""
FLOOR = """
UPDATE fence_floor SET max_token = %(token)s WHERE scope = %(scope)s AND max_token <= %(token)s"""
PART = """
INSERT INTO report_part AS r (scope, part, content, writer, token)
VALUES (%(scope)s, %(part)s, %(content)s, %(writer)s, %(token)s)
ON CONFLICT (scope, part) DO UPDATE
   SET content = EXCLUDED.content, writer = EXCLUDED.writer,
       token = EXCLUDED.token, written_at = clock_timestamp()"""
ATTEMPT = """
INSERT INTO write_attempt (scope, part, writer, token, mode, accepted)
VALUES (%(scope)s, %(part)s, %(writer)s, %(token)s, %(mode)s, %(accepted)s)"""

say_lock = threading.Lock()


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


# clock_gettime's system call number, where known: called raw, it reaches the kernel past a
# time-faking library preloaded into this process (libfaketime replaces the libc function that
# time.monotonic calls, not the call).
_SYS_CLOCK_GETTIME = {"x86_64": 228, "aarch64": 113}.get(os.uname().machine)


def kernel_clock_ms():
    """The kernel's monotonic clock in ms, or None where it cannot be read past libc."""
    if _SYS_CLOCK_GETTIME is None:
        return None
    ts = _Timespec()
    # syscall(2) takes longs: the number and CLOCK_MONOTONIC (1) passed as such.
    libc = ctypes.CDLL(None)
    if libc.syscall(ctypes.c_long(_SYS_CLOCK_GETTIME), ctypes.c_long(1), ctypes.byref(ts)) != 0:
        return None
    return ts.tv_sec * 1000 + ts.tv_nsec // 1_000_000


def say_kernel_clock(tag, ms):
    """Beside an event: the kernel's clock read with the event's own (F13 times this holder's
    clock against it; docs/holder-protocol.md)."""
    if ms is not None:
        print(f"kernel clock: {tag} ms={ms}", file=sys.stderr, flush=True)


def say(line):
    """One protocol line on stdout, whole and flushed (the renewer thread speaks too)."""
    with say_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def wait_for_go():
    """The next line from the lab must be GO; stdin closed: orphaned."""
    line = sys.stdin.readline()
    if not line:
        sys.exit(ORPHANED)
    if line.strip() != "GO":
        say(f"ERROR expected GO, got {line.strip()!r}")
        sys.exit(PROTOCOL)


def flags():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--store", default="postgres")
    p.add_argument("--socket-dir", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--lease", required=True)
    p.add_argument("--holder", required=True)
    p.add_argument("--ttl-ms", type=int, required=True)
    p.add_argument("--renew-ms", type=int, required=True)
    p.add_argument("--margin-ms", type=int, required=True)
    p.add_argument("--scope", required=True)
    p.add_argument("--part", required=True)
    p.add_argument("--content", required=True)
    p.add_argument("--mode", required=True)
    p.add_argument("--sut")  # the lab's profiles: this holder is its own design
    p.add_argument("--release", action="store_true")
    p.add_argument("--wait-before-check", action="store_true")
    p.add_argument("--wait-before-commit", action="store_true")
    p.add_argument("--wait-after-write", action="store_true")
    # Flags for what this holder does not do: accepted, and refused below when they ask for it.
    for unused in ("--run-id", "--store-endpoint", "--lease-host", "--lease-port",
                   "--resource-host", "--resource-port", "--loop-seed", "--loop-parts",
                   "--control-scope"):
        p.add_argument(unused)
    f = p.parse_args()  # an unknown flag: exit 2
    if f.store != "postgres":
        p.error(f"--store {f.store}: this holder runs seed 004's table on PostgreSQL only")
    if f.lease_host or f.resource_host:
        p.error("--lease-host/--resource-host: this holder connects over the Unix socket only")
    return f


def connect(f, db, role):
    # application_name = the holder's id: how the lab finds (and kills) this holder's sessions.
    return psycopg.connect(host=f.socket_dir, port=f.port, dbname=db, user=role,
                           application_name=f.holder, autocommit=True)


def looping(f):
    """The looping form (--loop-seed, lab chaos): hold, write every part, renew, release, again —
    each operation reported as its invocation and its completion (ok, fail, or info when an
    error leaves its outcome unknown) until stdin closes. Its own choices (how long it works, the
    parts' order) come from its seed; pauses, kills and crashes are the lab's business."""
    rng = random.Random(int(f.loop_seed))
    parts = int(f.loop_parts or 3)

    def stdin_watch():  # the lab ends the loop by closing stdin
        while sys.stdin.readline():
            pass
        os._exit(0)

    threading.Thread(target=stdin_watch, daemon=True).start()
    conns = {}

    def conn(db, role):
        """The database's connection, opened again after an error (the cluster restarts)."""
        while conns.get(db) is None or conns[db].closed:
            try:
                conns[db] = connect(f, db, role)
            except psycopg.Error:
                time.sleep(0.05)  # the server is coming back: poll it, as the lab's holder does
        return conns[db]

    def sql(db, role, query, args):
        try:
            return conn(db, role).execute(query, args)
        except psycopg.Error:
            conns[db] = None
            raise

    ids = iter(range(1, 1 << 62))

    def op(i, phase, kind, token=0, scope="-", part="-"):
        say(f"OP id={i} phase={phase} f={kind} token={token} scope={scope} part={part}")

    def work(max_s):
        time.sleep(rng.uniform(0, max_s))

    def write(token, scope, part, fenced):
        i = next(ids)
        op(i, "invoke", "write", token, scope, part)
        w = {"scope": scope, "part": part, "content": f"{f.holder}#{i}", "writer": f.holder,
             "token": token}
        try:
            if fenced:
                c = conn("res26", "resource_svc")
                with c.transaction():
                    accepted = c.execute(FLOOR, w).rowcount == 1
                    if accepted:
                        c.execute(PART, w)
                        c.execute(ATTEMPT, {**w, "mode": "fenced-scope", "accepted": True})
                if not accepted:
                    c.execute(ATTEMPT, {**w, "mode": "fenced-scope", "accepted": False})
            else:
                sql("res26", "resource_svc", PART, w)
                sql("res26", "resource_svc", ATTEMPT, {**w, "mode": "unfenced", "accepted": True})
                accepted = True
        except psycopg.Error:
            conns["res26"] = None
            op(i, "info", "write", token, scope, part)
            return
        op(i, "ok" if accepted else "fail", "write", token, scope, part)

    ttl = f.ttl_ms / 1000.0
    span = (f.ttl_ms - f.margin_ms) / 1000.0
    while True:
        args = {"name": f.lease, "holder": f.holder, "ttl_ms": f.ttl_ms}
        i = next(ids)
        op(i, "invoke", "acquire")
        sent = time.monotonic()
        try:
            row = sql("lease26", "lease_svc", ACQUIRE, args).fetchone()
        except psycopg.Error:
            op(i, "info", "acquire")
            work(ttl / 10)
            continue
        if row is None:
            op(i, "fail", "acquire")
            work(ttl / 10)
            continue
        token = args["token"] = row[0]
        op(i, "ok", "acquire", token)
        work(ttl / 10)
        # The local-deadline check, asking for time enough to write every part before it.
        per_part = ttl / (2 * parts)
        needed = per_part * parts + 0.1
        left = sent + span - time.monotonic()
        if left < needed:
            say(f"DEADLINE_PASSED token={token} overdue_ms={int((needed - left) * 1000)}")
            continue
        order = list(range(1, parts + 1))
        rng.shuffle(order)
        for n in order:  # no check between the parts: a pause here is what the fence is for
            work(per_part)
            write(token, f.scope, f"p{n}", f.mode != "unfenced")
            if f.control_scope:
                write(token, f.control_scope, f"p{n}", False)
        for kind, query in (("renew", RENEW), ("release", RELEASE)):
            i = next(ids)
            op(i, "invoke", kind, token)
            try:
                done = sql("lease26", "lease_svc", query, args).rowcount == 1
            except psycopg.Error:
                op(i, "info", kind, token)
                continue
            op(i, "ok" if done else "fail", kind, token)


def main():
    f = flags()
    hello = sys.stdin.readline().strip()
    if hello != f"HELLO version={VERSION}":
        say(f"ERROR unsupported protocol: {hello!r} (this holder speaks version {VERSION})")
        sys.exit(PROTOCOL)
    say(f"HELLO version={VERSION} pid={os.getpid()}")
    if f.loop_seed is not None:
        looping(f)

    lease = connect(f, "lease26", "lease_svc")
    resource = connect(f, "res26", "resource_svc")
    args = {"name": f.lease, "holder": f.holder, "ttl_ms": f.ttl_ms}
    span = (f.ttl_ms - f.margin_ms) / 1000.0

    # Acquire. The local deadline runs from the monotonic clock read before the request.
    sent = time.monotonic()
    row = lease.execute(ACQUIRE, args).fetchone()
    if row is None:
        say("REFUSED")
        sys.exit(NOT_ACQUIRED)
    token = row[0]
    args["token"] = token
    deadline = [sent + span]
    say(f"ACQUIRED token={token}")

    # The background renewer, on a connection of its own; it moves the deadline on success.
    stop = threading.Event()
    named = threading.Event()

    def renewer():
        # Named `renewer` where the lab looks for it (/proc/PID/task/TID/comm): a frozen holder
        # must show its renewer frozen too.
        try:
            ctypes.CDLL(None).prctl(15, b"renewer", 0, 0, 0)  # PR_SET_NAME
        finally:
            named.set()  # even if naming failed: the holder must never hang on it
        conn = connect(f, "lease26", "lease_svc")
        while not stop.wait(f.renew_ms / 1000.0):
            sent = time.monotonic()
            ok = conn.execute(RENEW, args).rowcount == 1
            if ok:
                deadline[0] = sent + span
            if not stop.is_set():
                say(f"RENEWED ok={str(ok).lower()} token={token}")

    if f.renew_ms > 0:
        threading.Thread(target=renewer, daemon=True).start()
        # On only once it is named: a thread just started may not have run a line yet (seen
        # under load: the write point reached, the renewer still unnamed).
        named.wait()

    def left_ms(now):
        return max(0, int((deadline[0] - now) * 1000))

    if f.wait_before_check:
        now, kernel = time.monotonic(), kernel_clock_ms()
        say(f"BEFORE_CHECK token={token} deadline_left_ms={left_ms(now)}")
        say_kernel_clock("BEFORE_CHECK", kernel)
        wait_for_go()
    # The local-deadline check: an efficiency device; the fence below is what keeps I3.
    now, kernel = time.monotonic(), kernel_clock_ms()
    if now >= deadline[0]:
        stop.set()
        say(f"DEADLINE_PASSED token={token} overdue_ms={int((now - deadline[0]) * 1000)}")
        say_kernel_clock("DEADLINE_PASSED", kernel)
        sys.exit(DEADLINE)
    say(f"AT_WRITE_POINT token={token} deadline_left_ms={left_ms(now)}")
    say_kernel_clock("AT_WRITE_POINT", kernel)
    wait_for_go()

    # The write: no check of the lease here — the resource's fence decides.
    w = {"scope": f.scope, "part": f.part, "content": f.content, "writer": f.holder,
         "token": token}
    if f.mode == "unfenced":
        resource.execute(PART, w)
        accepted, mode = True, "unfenced"
    else:
        mode = "fenced-scope"
        with resource.transaction():
            accepted = resource.execute(FLOOR, w).rowcount == 1
            if accepted:
                resource.execute(PART, w)
                resource.execute(ATTEMPT, {**w, "mode": mode, "accepted": True})
                if f.wait_before_commit:
                    say(f"BEFORE_COMMIT token={token}")
                    wait_for_go()
            else:
                raise psycopg.Rollback()  # leaves the block; nothing of the write stays
    if f.mode == "unfenced" or not accepted:
        # A rejected attempt's record outlives its write's rollback.
        resource.execute(ATTEMPT, {**w, "mode": mode, "accepted": accepted})
    stop.set()
    say(f"WRITE accepted={str(accepted).lower()} token={token}")
    if f.wait_after_write:
        wait_for_go()

    renewed = lease.execute(RENEW, args).rowcount == 1
    say(f"RENEW_AFTER_WRITE ok={str(renewed).lower()}")
    if f.release:
        released = lease.execute(RELEASE, args).rowcount == 1
        say(f"RELEASED ok={str(released).lower()}")
    if not renewed:
        sys.exit(LEASE_LOST)
    sys.exit(WROTE if accepted else REJECTED)


if __name__ == "__main__":
    try:
        main()
    except psycopg.Error as e:
        say("ERROR " + " ".join(str(e).split()))
        sys.exit(FAILURE)
