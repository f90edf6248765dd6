#!/usr/bin/env python3
"""etcd3gw's `Lock` on etcd, as its README shows (`client.lock(name, ttl)`): a key under
`/locks/` put in a transaction only if it does not exist, bound to a lease of `ttl` seconds, the
value a uuid. No auto-renewal (`refresh()` is the application's to call). etcd3gw, not
python-etcd3: it speaks etcd's JSON gateway over HTTP and is maintained (OpenStack's, and what
tooz's etcd driver uses); python-etcd3's last release (0.12.0, 2020) needs protobuf 3.20 and
tenacity 6 to run at all. Its fence: the lock key's `create_revision`, which etcd makes greater
for every later creation — read with the same client (`client.get(key, metadata=True)`).
Its own question: `lock.is_acquired()`."""
import math

from etcd3gw.client import Etcd3Client

import libholder


class Etcd3gwLock:
    package, service, stores = "etcd3gw", "etcd", ("etcd",)
    fence = "the lock key's create_revision"
    question = "lock.is_acquired()"

    def __init__(self, f):
        (host, port), = libholder.endpoints(f)
        self.client = Etcd3Client(host=host, port=port, timeout=10)
        # A lease's TTL is whole seconds: the lab's TTL rounded up.
        self.lock = self.client.lock(f.lease, ttl=max(1, math.ceil(f.ttl_ms / 1000)))

    def acquire(self):
        return self.lock.acquire()

    def token(self):
        [(_, meta)] = self.client.get(self.lock.key, metadata=True)
        return int(meta["create_revision"])

    def holding(self):
        return self.lock.key, self.lock.uuid

    def ask(self):
        return self.lock.is_acquired()

    def release(self):
        return self.lock.release()

    def close(self):
        self.client.session.close()


if __name__ == "__main__":
    libholder.run(Etcd3gwLock)
