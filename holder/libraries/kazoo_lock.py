#!/usr/bin/env python3
"""kazoo's `Lock` on ZooKeeper, as kazoo's docs show it (`zk.Lock(path, identifier)`), as a
holder of the fencing lab (libholder.py says the timeline). The session timeout is the lab's TTL:
a ZooKeeper lock lasts as long as the session that made its node. kazoo exposes the lock node
(`lock.node`); its creation zxid (`czxid`, read with the same client) is the fence: greater for
every later node of the ensemble, unlike the node's sequence suffix, which restarts with a new
parent (R1)."""
from kazoo.client import KazooClient

import libholder


class KazooLock:
    package, service, stores = "kazoo", "zookeeper", ("zookeeper",)
    fence = "the lock node's czxid"
    question = "lock.is_acquired"

    def __init__(self, f):
        self.zk = KazooClient(hosts=f.store_endpoint, timeout=f.ttl_ms / 1000.0)
        self.zk.start(timeout=10)
        self.lock = self.zk.Lock(f"/lab-locks/{f.lease}", f.holder)
        self.holder = f.holder

    def acquire(self):
        return self.lock.acquire(blocking=False)

    def token(self):
        return self.zk.exists(f"{self.lock.path}/{self.lock.node}").czxid

    def holding(self):
        # The lock is the lowest-numbered child of this path; kazoo writes the identifier in it.
        return self.lock.path, self.holder

    def ask(self):
        return self.lock.is_acquired

    def release(self):
        return self.lock.release()

    def close(self):
        try:
            self.zk.stop()
            self.zk.close()
        except Exception:
            pass


if __name__ == "__main__":
    libholder.run(KazooLock)
