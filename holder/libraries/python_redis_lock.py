#!/usr/bin/env python3
"""python-redis-lock's `redis_lock.Lock` on Redis with `auto_renewal=True`, as its README shows:
a key `lock:<name>` set NX EX (whole seconds) with the lock's random id as its value, a daemon
thread renewing it every two thirds of `expire`. The id is random, not ordered: nothing to fence
with. Its own question: `lock.get_owner_id() == lock.id`, the README's way to ask who holds it."""
import math

import redis
import redis_lock

import libholder


class PythonRedisLock:
    package, service, stores = "python-redis-lock", "redis", ("redis", "redis-plain")
    fence = None
    question = "lock.get_owner_id()==lock.id"

    def __init__(self, f):
        (host, port), = libholder.endpoints(f)
        self.r = redis.StrictRedis(host=host, port=port, socket_timeout=10)
        # `expire` is whole seconds: the lab's TTL rounded up.
        self.lock = redis_lock.Lock(self.r, f.lease, expire=max(1, math.ceil(f.ttl_ms / 1000)),
                                    auto_renewal=True)

    def acquire(self):
        return self.lock.acquire(blocking=False)

    def holding(self):
        return self.lock._name, self.lock.id  # `lock:<name>`, as the library names the key

    def ask(self):
        owner = self.lock.get_owner_id()  # bytes or str, as the Redis client decodes
        if isinstance(owner, bytes):
            owner = owner.decode()
        return owner == self.lock.id

    def release(self):
        return self.lock.release()

    def close(self):
        self.r.close()


if __name__ == "__main__":
    libholder.run(PythonRedisLock)
