#!/usr/bin/env python3
"""pottery's `Redlock` over N Redis servers (the lab starts five, as RL1–RL3 use), as pottery's
README shows it: `Redlock(key=..., masters={Redis(...), ...}, auto_release_time=...)`, the key
`redlock:<name>` set NX PX on each server with a random value, held when a majority answered
within the validity. No auto-renewal. Its value is random, not ordered: nothing to fence with.
Its own question: `lock.locked()`, which answers the validity left in seconds (0 when not held:
pottery's docstring says milliseconds, its code divides by 1000); the holder asks whether it is
above 0."""
from redis import Redis
from pottery import Redlock

import libholder


class PotteryRedlock:
    package, service, stores = "pottery", "five Redis servers", ("redlock",)
    fence = None
    question = "lock.locked()>0"

    def __init__(self, f):
        self.masters = {Redis(host=h, port=p, socket_timeout=0.5) for h, p in libholder.endpoints(f)}
        self.lock = Redlock(key=f.lease, masters=self.masters,
                            auto_release_time=f.ttl_ms / 1000.0)

    def acquire(self):
        return self.lock.acquire(blocking=False)

    def holding(self):
        # The key and the value pottery wrote on each server (its own attributes: read for the
        # lab's evidence only).
        return self.lock.key, self.lock._uuid

    def ask(self):
        return self.lock.locked() > 0

    def release(self):
        return self.lock.release()

    def close(self):
        for m in self.masters:
            m.close()


if __name__ == "__main__":
    libholder.run(PotteryRedlock)
