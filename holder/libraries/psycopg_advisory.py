#!/usr/bin/env python3
"""psycopg with PostgreSQL's session-level advisory lock, as PostgreSQL's docs and countless
`with advisory_lock(...)` blocks use it: `SELECT pg_try_advisory_lock(key)` on a connection of its
own, kept open while the lock is held, `pg_advisory_unlock(key)` to release. The lock has no TTL:
it lasts as long as the session. To make it a lease, the session is opened with
`idle_session_timeout` set to the TTL (the `options` connection parameter): the server ends a
session silent that long, and the lock with it. No renewal (nothing is sent while the holder
waits). Nothing ordered to fence with. Its own question: does this session still hold the lock
(`pg_locks`, asked on the locking session)."""
import zlib

import psycopg

import libholder

# A one-bigint advisory lock shows in pg_locks as (classid, objid) = its high and low 32 bits,
# objsubid 1; the key here is below 2^31, so classid is 0.
HELD = """SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted
    AND pid = pg_backend_pid() AND classid = 0 AND objid = %(key)s::bigint::oid
    AND objsubid = 1)"""


class PsycopgAdvisory:
    package, service, stores = "psycopg", "postgres", ("pg-advisory",)
    fence = None
    question = "pg_locks.granted"

    def __init__(self, f):
        self.key = zlib.crc32(f.lease.encode()) & 0x7FFFFFFF
        self.conn = psycopg.connect(
            f.store_endpoint, user="lease_svc", application_name=f.holder, autocommit=True,
            options=f"-c idle_session_timeout={f.ttl_ms}ms")
        self.owner = f.holder

    def acquire(self):
        return self.conn.execute("SELECT pg_try_advisory_lock(%s)", (self.key,)).fetchone()[0]

    def holding(self):
        return f"advisory:{self.key}", self.owner

    def ask(self):
        return self.conn.execute(HELD, {"key": self.key}).fetchone()[0]

    def release(self):
        return self.conn.execute("SELECT pg_advisory_unlock(%s)", (self.key,)).fetchone()[0]

    def close(self):
        self.conn.close()


if __name__ == "__main__":
    libholder.run(PsycopgAdvisory)
