#!/usr/bin/env python3
"""redis-py's `Redis.lock` (`redis.lock.Lock`) on Redis, as redis-py's docs show it: a key SET
NX PX with a random token as its value, released by a Lua script that deletes the key only if it
still holds that token. No auto-renewal (`timeout` is the TTL). Its token is random, not ordered:
nothing to fence with. Its own question: `lock.owned()`."""
import redis

import libholder


class RedisPyLock:
    package, service, stores = "redis", "redis", ("redis", "redis-plain")
    fence = None
    question = "lock.owned()"

    def __init__(self, f):
        (host, port), = libholder.endpoints(f)
        self.r = redis.Redis(host=host, port=port, socket_timeout=10)
        self.lock = self.r.lock(f"lab-lock:{f.lease}", timeout=f.ttl_ms / 1000.0)

    def acquire(self):
        return self.lock.acquire(blocking=False)

    def holding(self):
        return self.lock.name, self.lock.local.token.decode()

    def ask(self):
        return self.lock.owned()

    def release(self):
        return self.lock.release()

    def close(self):
        self.r.close()


if __name__ == "__main__":
    libholder.run(RedisPyLock)
