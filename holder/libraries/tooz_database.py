#!/usr/bin/env python3
"""tooz's database drivers, as tooz's docs show them: `coordination.get_coordinator(url, member)`,
`coordinator.start()`, `coordinator.get_lock(name)`. Chosen by `--store`:

- `pg-advisory`: the postgresql driver (`postgresql://…`, psycopg2; tooz marks it deprecated)
  takes `pg_try_advisory_lock(k1, k2)` on a connection of the lock's own, where (k1, k2) are the
  first two bytes of md5(name) — 65,536 locks in all: two names that share them exclude each
  other;
- `mariadb-getlock`: the mysql driver (`mysql://…`, PyMySQL) takes `GET_LOCK(name, 0)` on a
  connection of the lock's own.

Both drivers say `NON_TIMEOUT_BASED`: the lock lasts as long as its connection, and tooz offers
no setting to end an idle one. As an operator would, the server's own idle timeout is set to the
lab's TTL outside tooz: libpq's `PGOPTIONS` for psycopg2 — `idle_in_transaction_session_timeout`
as well as `idle_session_timeout`, since psycopg2 is not in autocommit and the session that took
the lock stays "idle in transaction", which the second alone never ends —, the server's
`wait_timeout` (`SET GLOBAL`, whole seconds, before tooz connects) for MariaDB. Nothing ordered to
fence with. Its own question: `lock.is_still_owner()`, which neither driver implements (tooz's
base class raises `NotImplemented`): that is the answer reported."""
import math
import os
import urllib.parse

import pymysql
from tooz import coordination

import libholder


class ToozDatabase:
    package, service, stores = "tooz", "postgres or mariadb", ("pg-advisory", "mariadb-getlock")
    fence = None
    question = "lock.is_still_owner()"

    def __init__(self, f):
        self.store = f.store
        self.member = f.holder
        if f.store == "pg-advisory":
            # The lab's lease database over its Unix socket: a libpq URI whose query holds the
            # socket's directory and port, which tooz reads as its `host` and `port` options.
            query = urllib.parse.urlparse(f.store_endpoint).query
            url = f"postgresql://lease_svc@/lease26?{query}"
            # psycopg2 is not in autocommit: the session that took the lock stays "idle in
            # transaction", which idle_session_timeout does not end — the second setting does.
            os.environ["PGOPTIONS"] = (f"-c idle_session_timeout={f.ttl_ms}ms "
                                       f"-c idle_in_transaction_session_timeout={f.ttl_ms}ms")
            # The session's name in pg_stat_activity: the lab's truth names the holder by it.
            os.environ["PGAPPNAME"] = f.holder
        else:
            socket = f.store_endpoint
            seconds = max(1, math.ceil(f.ttl_ms / 1000))
            admin = pymysql.connect(unix_socket=socket, user="root")
            with admin.cursor() as cur:
                cur.execute("SET GLOBAL wait_timeout = %s", (seconds,))
            admin.close()
            url = f"mysql://root@localhost/lab_lock?unix_socket={urllib.parse.quote(socket)}"
        self.coord = coordination.get_coordinator(url, f.holder.encode())
        self.coord.start()
        self.lock = self.coord.get_lock(f.lease.encode())

    def acquire(self):
        return self.lock.acquire(blocking=False)

    def holding(self):
        # Where each driver keeps the lock (tooz's own attributes, read for the lab's evidence
        # only): the advisory lock's two keys and the session's name; the named lock's name and
        # the connection that holds it.
        if self.store == "pg-advisory":
            k1, k2 = self.lock.key
            return f"advisory:{k1}:{k2}", self.member
        return self.lock.name.decode(), f"connection={self.lock._conn.thread_id()}"

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
    libholder.run(ToozDatabase)
