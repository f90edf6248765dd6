#!/usr/bin/env python3
"""One holder of `lab bench --leases … --library ID`: the lease bench's holder, through a
published lock library's own API instead of the lab's Rust client — the same schedule as the
lab's (`lab/src/bench/lease_scaling.rs`), so that the two compare like for like on the same
service, leases, holders and period.

    lease j of n taken in its slot j·R/n of the first period (the library's non-blocking
    acquire), then renewed every R from when it was taken — the library's own renewal call:
    `Lock.extend` (redis-py, python-redis-lock), `Redlock.extend` (pottery), the lock's lease
    `refresh` (etcd3gw); or, where a library renews a process's locks together, one call per
    period for all of them: kazoo's session (one request through it, as the lab's
    zookeeper-session does), tooz's `coordinator.heartbeat()`.

Lines on stdout, for the lab:
    ACQUIRED s=<seconds from the start to the last lease taken>
    RESULT <json: ok, expired, errors, latencies_ms, lags_ms, acquire_s>
The lab answers `WINDOW ms=<D>` on stdin once every holder of the cell has taken its leases:
renewals due in the D ms from its arrival are measured. The process then waits for its stdin to
close and exits without releasing (the lab resets the service between cells). A renewal waits
for its slot in the period: the schedule under test, not a wait for a state."""
import argparse
import heapq
import json
import math
import sys
import threading
import time

import libholder


def seconds(ttl_ms):
    """A TTL in whole seconds, rounded up: what python-redis-lock, etcd leases and tooz take."""
    return max(1, math.ceil(ttl_ms / 1000))


class RedisPy:
    batched = False

    def __init__(self, f):
        import redis
        (host, port), = libholder.endpoints(f)
        self.r = redis.Redis(host=host, port=port, socket_timeout=10)
        self.ttl = f.ttl_ms / 1000.0

    def acquire(self, name):
        lock = self.r.lock(f"lab-lock:{name}", timeout=self.ttl)
        return lock if lock.acquire(blocking=False) else None

    def renew(self, lock):
        from redis.exceptions import LockNotOwnedError
        try:
            return lock.extend(self.ttl, replace_ttl=True)
        except LockNotOwnedError:
            return False


class PythonRedisLock:
    batched = False

    def __init__(self, f):
        import redis
        (host, port), = libholder.endpoints(f)
        self.r = redis.StrictRedis(host=host, port=port, socket_timeout=10)
        self.expire = seconds(f.ttl_ms)

    def acquire(self, name):
        import redis_lock
        lock = redis_lock.Lock(self.r, name, expire=self.expire)
        return lock if lock.acquire(blocking=False) else None

    def renew(self, lock):
        import redis_lock
        try:
            lock.extend()
            return True
        except redis_lock.NotAcquired:
            return False


class Pottery:
    batched = False

    def __init__(self, f):
        from redis import Redis
        self.masters = {Redis(host=h, port=p, socket_timeout=0.5)
                        for h, p in libholder.endpoints(f)}
        self.ttl = f.ttl_ms / 1000.0

    def acquire(self, name):
        from pottery import Redlock
        # pottery extends a lock 3 times by default (`num_extensions`); a lease renewed for the
        # whole window needs more.
        lock = Redlock(key=name, masters=self.masters, auto_release_time=self.ttl,
                       num_extensions=sys.maxsize)
        return lock if lock.acquire(blocking=False) else None

    def renew(self, lock):
        from pottery import ExtendUnlockedLock
        try:
            lock.extend()
            return True
        except ExtendUnlockedLock:
            return False


class Etcd3gw:
    batched = False

    def __init__(self, f):
        from etcd3gw.client import Etcd3Client
        (host, port), = libholder.endpoints(f)
        self.client = Etcd3Client(host=host, port=port, timeout=10)
        self.ttl = seconds(f.ttl_ms)

    def acquire(self, name):
        lock = self.client.lock(name, ttl=self.ttl)
        return lock if lock.acquire() else None

    def renew(self, lock):
        # etcd answers no TTL (etcd3gw: -1) for a lease that expired.
        return lock.refresh() > 0


class Kazoo:
    batched = True

    def __init__(self, f):
        from kazoo.client import KazooClient
        self.zk = KazooClient(hosts=f.store_endpoint, timeout=f.ttl_ms / 1000.0)
        self.zk.start(timeout=10)
        self.holder = f.holder

    def acquire(self, name):
        lock = self.zk.Lock(f"/lab-locks/{name}", self.holder)
        return lock if lock.acquire(blocking=False) else None

    def renew_all(self, locks):
        # The session's heartbeat keeps every lock; one request through the session proves it
        # alive (the lab's zookeeper-session asks the same).
        from kazoo.protocol.states import KazooState
        self.zk.exists("/lab-locks")
        alive = self.zk.state == KazooState.CONNECTED
        return [alive for _ in locks]


class ToozRedis:
    batched = True

    def __init__(self, f):
        from tooz import coordination
        (host, port), = libholder.endpoints(f)
        url = f"redis://{host}:{port}?lock_timeout={seconds(f.ttl_ms)}"
        self.coord = coordination.get_coordinator(url, f.holder.encode())
        self.coord.start(start_heart=False)  # the bench calls heartbeat() on its schedule

    def acquire(self, name):
        lock = self.coord.get_lock(name.encode())
        return lock if lock.acquire(blocking=False) else None

    def renew_all(self, locks):
        # tooz's heartbeat re-acquires each lock the coordinator holds and logs (does not raise)
        # a lock it lost: whether each is still this coordinator's is asked of the lock after.
        self.coord.heartbeat()
        return [lock.acquired for lock in locks]


LIBRARIES = {"redis-py": RedisPy, "python-redis-lock": PythonRedisLock, "pottery": Pottery,
             "etcd3gw": Etcd3gw, "kazoo": Kazoo, "tooz-redis": ToozRedis}


class Window:
    """The measuring window, opened by the lab's `WINDOW ms=D` line."""

    def __init__(self):
        self.start = self.end = None
        self.opened = threading.Event()

    def read(self):
        line = sys.stdin.readline().split()
        if len(line) == 2 and line[0] == "WINDOW" and line[1].startswith("ms="):
            now = time.monotonic()
            self.start, self.end = now, now + int(line[1][3:]) / 1000.0
        else:  # the lab gone, or the cell abandoned: stop at once
            self.start = self.end = time.monotonic()
        self.opened.set()


def wait_until(at):
    delay = at - time.monotonic()
    if delay > 0:
        time.sleep(delay)  # the schedule's own slot


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--library", required=True, choices=sorted(LIBRARIES))
    p.add_argument("--store-endpoint", required=True)
    p.add_argument("--holder", required=True)
    p.add_argument("--names", required=True, help="the leases, comma-separated")
    p.add_argument("--ttl-ms", type=int, required=True)
    p.add_argument("--renew-ms", type=int, required=True)
    f = p.parse_args()
    lib = LIBRARIES[f.library](f)
    names = f.names.split(",")
    renew = f.renew_ms / 1000.0
    seen = {"ok": 0, "expired": 0, "errors": 0, "latencies_ms": [], "lags_ms": [],
            "acquire_s": 0.0}
    window = Window()
    started = time.monotonic()
    slot = renew / len(names)
    due = [(started + slot * j, j) for j in range(len(names))]
    heapq.heapify(due)
    held = [None] * len(names)
    taken = 0
    batch_at = started + renew

    def measured(at, sent, results):
        if window.start is None or at < window.start:
            return
        seen["lags_ms"].append((sent - at) * 1000.0)
        seen["latencies_ms"].append((time.monotonic() - sent) * 1000.0)
        for r in results:
            seen["ok" if r is True else "expired" if r is False else "errors"] += 1

    while True:
        nxt = due[0][0] if due else math.inf
        if lib.batched and batch_at <= nxt:
            at, j = batch_at, None
        else:
            at, j = heapq.heappop(due)
        # The window's end, by the schedule or by the clock: a holder behind its schedule does not
        # send the renewals that fell due in the window after it closed (they were not made).
        if window.end is not None and (at >= window.end or time.monotonic() >= window.end):
            break
        wait_until(at)
        sent = time.monotonic()
        if j is not None and held[j] is None:
            held[j] = lib.acquire(names[j])
            if held[j] is None:
                print(f"ERROR {names[j]} was not free", flush=True)
                sys.exit(1)
            taken += 1
            seen["acquire_s"] = time.monotonic() - started
            if not lib.batched:
                heapq.heappush(due, (sent + renew, j))
            if taken == len(names):
                print(f"ACQUIRED s={seen['acquire_s']:.3f}", flush=True)
                threading.Thread(target=window.read, daemon=True).start()
            continue
        locks = [h for h in held if h is not None]
        try:
            results = lib.renew_all(locks) if j is None else [lib.renew(held[j])]
        except Exception as e:  # an error of the library's: counted, the holder goes on
            print(f"renew failed: {type(e).__name__}: {e}", file=sys.stderr)
            results = [None] * (len(locks) if j is None else 1)
        measured(at, sent, results)
        if j is None:
            batch_at += renew
        else:
            heapq.heappush(due, (at + renew, j))
    print("RESULT " + json.dumps(seen), flush=True)
    sys.stdin.read()  # until the lab closes it: its CPU is read before this process ends


if __name__ == "__main__":
    main()
