"""The part every library holder shares: the holder protocol (docs/holder-protocol.md, version 5),
the flags, and the guarded write to the lab's resource. What differs per library — how it takes
the lock, what it offers as a fence, the question it answers about ownership, how its release
ends — is one small class per file beside this one (`kazoo_lock.py`, `redis_py_lock.py`, …),
each using its library as that library's own README shows.

One timeline, the same for every library:

    HELLO → take the lock (its own acquire; `REFUSED`, exit 5, when another holds it)
          → ACQUIRED token=T|none → HOLDING key=K owner=O → AT_WRITE_POINT … → GO
          → ASKED question=Q answer=A   (the library's own ownership question, right before
                                         the write)
          → WRITE accepted=B token=T|none
          → (--wait-after-write: GO)
          → RELEASE_ENDED said=S        (how the library's release ended, quoted)

With --wait-before-check (F10) it stops before the question instead (BEFORE_CHECK, GO), asks,
and writes only if the library says the lock is still held — as the library's docs advise —,
exiting 8 without writing otherwise. Without it, the holder does not act on its library's answer: the lab freezes it between the write point and
the write, and what the resource does with the write that follows is the experiment. The answer
is reported for the library card's column "what the library tells the application".
"""
import argparse
import os
import sys
import threading
import time
import traceback

import psycopg

VERSION = 5
WROTE, FAILURE, USAGE, LEASE_LOST, REJECTED, NOT_ACQUIRED, ORPHANED, PROTOCOL, CHECK_FAILED = \
    range(9)

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

_say_lock = threading.Lock()


def say(line):
    """One protocol line on stdout, whole and flushed."""
    with _say_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def one_line(text):
    return " ".join(str(text).split())


def quoted_outcome(call):
    """What a call of the library did, as the card quotes it: `returned X` or `raised E: msg`,
    on one line and at most 200 characters (pottery's exceptions print every server's client)."""
    try:
        value = call()
    except Exception as e:  # the library's own exception is the observation
        return False, short(f"raised {type(e).__name__}: {e}")
    return value is not False, short(f"returned {value!r}")


def short(text, most=200):
    text = one_line(text)
    return text if len(text) <= most else text[:most - 1] + "…"


def wait_for_go():
    line = sys.stdin.readline()
    if not line:
        sys.exit(ORPHANED)
    if line.strip() != "GO":
        say(f"ERROR expected GO, got {line.strip()!r}")
        sys.exit(PROTOCOL)


def flags(library):
    p = argparse.ArgumentParser(
        description=f"A library holder of the fencing lab: {library.package} on {library.service}.")
    p.add_argument("--store", required=True)
    p.add_argument("--store-endpoint", required=True)
    p.add_argument("--socket-dir", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--lease", required=True)
    p.add_argument("--holder", required=True)
    p.add_argument("--ttl-ms", type=int, required=True)
    p.add_argument("--scope", required=True)
    p.add_argument("--part", required=True)
    p.add_argument("--content", required=True)
    p.add_argument("--mode", required=True)
    p.add_argument("--release", action="store_true")
    p.add_argument("--wait-after-write", action="store_true")
    p.add_argument("--wait-before-check", action="store_true")
    # The lab's own design's knobs: a library renews (or not) by itself and has no local deadline.
    for ignored in ("--renew-ms", "--margin-ms", "--sut", "--run-id", "--lease-host",
                    "--lease-port", "--resource-host", "--resource-port", "--loop-parts"):
        p.add_argument(ignored)
    f = p.parse_args()  # an unknown flag — a fault point this holder does not have — exits 2
    if f.store not in library.stores:
        p.error(f"--store {f.store}: this holder is {library.package} on "
                f"{' or '.join(library.stores)}")
    if f.mode != "unfenced" and library.fence is None:
        p.error(f"--mode {f.mode}: {library.package} exposes nothing to fence with; "
                "only --mode unfenced applies")
    return f


def write(f, token):
    """The guarded write, to the lab's resource: fenced by the token (the scope's floor advanced
    in the same transaction) unless --mode unfenced. Returns whether the resource accepted it."""
    c = psycopg.connect(host=f.socket_dir, port=f.port, dbname="res26", user="resource_svc",
                        application_name=f.holder, autocommit=True)
    w = {"scope": f.scope, "part": f.part, "content": f.content, "writer": f.holder,
         "token": token if token is not None else 0}
    if f.mode == "unfenced":
        c.execute(PART, w)
        accepted, mode = True, "unfenced"
    else:
        mode = "fenced-scope"
        with c.transaction():
            accepted = c.execute(FLOOR, w).rowcount == 1
            if accepted:
                c.execute(PART, w)
                c.execute(ATTEMPT, {**w, "mode": mode, "accepted": True})
            else:
                raise psycopg.Rollback()
    if f.mode == "unfenced" or not accepted:
        c.execute(ATTEMPT, {**w, "mode": mode, "accepted": accepted})
    c.close()
    return accepted


def run(library):
    """The timeline above, for `library` (a class: see kazoo_lock.py for the shape)."""
    f = flags(library)
    hello = sys.stdin.readline().strip()
    if hello != f"HELLO version={VERSION}":
        say(f"ERROR unsupported protocol: {hello!r} (this holder speaks version {VERSION})")
        sys.exit(PROTOCOL)
    say(f"HELLO version={VERSION} pid={os.getpid()}")
    try:
        lock = library(f)
        sent = time.monotonic()
        if not lock.acquire():
            say("REFUSED")
            lock.close()
            sys.exit(NOT_ACQUIRED)
        token = lock.token() if library.fence is not None else None
        shown = "none" if token is None else str(token)
        say(f"ACQUIRED token={shown}")
        key, owner = lock.holding()
        say(f"HOLDING key={key} owner={owner}")
        # No local deadline of the holder's own: what is left of the TTL it asked for, by its
        # monotonic clock, is reported for the evidence only.
        def left_ms():
            return max(0, int((sent + f.ttl_ms / 1000.0 - time.monotonic()) * 1000))

        if f.wait_before_check:
            # F10: the check the library offers, called as its docs advise — before the write,
            # the write only if it says the lock is still held. The pause comes before it.
            say(f"BEFORE_CHECK token={shown} deadline_left_ms={left_ms()}")
            wait_for_go()
            _, answer = quoted_outcome(lock.ask)
            say(f"ASKED question={library.question} answer={answer}")
            if answer != "returned True":
                lock.close()
                sys.exit(CHECK_FAILED)  # nothing written
            say(f"AT_WRITE_POINT token={shown} deadline_left_ms={left_ms()}")
            wait_for_go()
        else:
            say(f"AT_WRITE_POINT token={shown} deadline_left_ms={left_ms()}")
            wait_for_go()
            _, answer = quoted_outcome(lock.ask)
            say(f"ASKED question={library.question} answer={answer}")
        accepted = write(f, token)
        say(f"WRITE accepted={str(accepted).lower()} token={shown}")
        if f.wait_after_write:
            wait_for_go()
        released, said = quoted_outcome(lock.release)
        say(f"RELEASE_ENDED ok={str(released).lower()} said={said}")
        lock.close()
    except SystemExit:
        raise
    except Exception as e:
        traceback.print_exc()
        say("ERROR " + one_line(f"{type(e).__name__}: {e}"))
        sys.exit(FAILURE)
    if not accepted:
        sys.exit(REJECTED)
    sys.exit(WROTE if released else LEASE_LOST)


def endpoints(f):
    """`--store-endpoint` as (host, port) pairs: one server, or an ensemble's / Redlock's N."""
    pairs = []
    for one in f.store_endpoint.split(","):
        host, _, port = one.rpartition(":")
        pairs.append((host, int(port)))
    return pairs


def shown_value(raw):
    """A value stored at the service as the lab shows it (`HOLDING … owner=`): its text when
    every byte is printable ASCII other than a space, else `hex:` and its bytes in hex — the
    lab's own rule for what it reads there, so that the two compare."""
    if raw and all(0x21 <= b <= 0x7e for b in raw):
        return raw.decode("ascii")
    return "hex:" + raw.hex()
