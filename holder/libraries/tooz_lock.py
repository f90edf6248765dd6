#!/usr/bin/env python3
"""tooz's coordinator lock, as tooz's docs show it: `coordination.get_coordinator(url, member)`,
`coordinator.start(start_heart=True)` (the heartbeat thread that keeps its locks alive), then
`coordinator.get_lock(name)`. One file for its three drivers, chosen by `--store`: zookeeper
(a kazoo `Lock` inside), redis (a redis-py lock inside, refreshed by the heartbeat) and etcd (the
etcd3gw driver, `etcd3+http://`). tooz exposes nothing to fence with on any of them. Its own
question: `lock.is_still_owner()` — on etcd3gw tooz answers `NotImplemented`, which is the
answer reported."""
import base64
import math

from tooz import coordination

import libholder


class ToozLock:
    package, service, stores = "tooz", "zookeeper, redis or etcd", ("zookeeper", "redis", "etcd")
    fence = None
    question = "lock.is_still_owner()"

    def __init__(self, f):
        (host, port), = libholder.endpoints(f)
        seconds = max(1, math.ceil(f.ttl_ms / 1000))
        url = {
            # tooz takes the session timeout in whole seconds.
            "zookeeper": f"zookeeper://{host}:{port}?timeout={seconds}",
            "redis": f"redis://{host}:{port}?lock_timeout={seconds}",
            "etcd": f"etcd3+http://{host}:{port}?lock_timeout={seconds}",
        }[f.store]
        self.store = f.store
        self.member = f.holder
        self.coord = coordination.get_coordinator(url, f.holder.encode())
        self.coord.start(start_heart=True)
        self.lock = self.coord.get_lock(f.lease.encode())

    def acquire(self):
        return self.lock.acquire(blocking=False)

    def holding(self):
        # Where each driver keeps the lock, and what it stores there (tooz's own attributes:
        # read for the lab's evidence only, never to decide anything).
        if self.store == "zookeeper":
            return self.lock._lock.path, self.member
        if self.store == "redis":
            return self.lock.name.decode(), self.lock._lock.local.token.decode()
        return self.lock._key.decode(), libholder.shown_value(base64.b64decode(self.lock._uuid))

    def ask(self):
        return self.lock.is_still_owner()

    def release(self):
        return self.lock.release()

    def close(self):
        try:
            self.coord.stop()
        except Exception:
            pass


if __name__ == "__main__":
    libholder.run(ToozLock)
