// A holder of the fencing lab in Java: seed 004's lease client and its fenced write, speaking the
// holder protocol (docs/holder-protocol.md) so that the lab can freeze, kill and slow a JVM like
// its own holder. Run by the lab (holder.sh beside this file starts it):
//
//     ./run.sh --holder-cmd examples/holders/java/holder.sh --only F4,F5,F10,F12
//
// Shaped like seed 004's client: LeaseStore.acquire reads System.nanoTime() *before* it sends the
// request and sets the local deadline to that + ttl − margin; a renewer thread renews on a
// connection of its own and moves the deadline on; the write is fenced by the token at the
// resource. One timeline: acquire → renew in the background → the local-deadline check → stand at
// the write point until GO → write → renew once → release if asked → exit with the status that
// says how it went. With --loop-seed, the looping form lab chaos drives (class Looping). JDBC
// cannot use PostgreSQL's Unix socket: the lab's cluster also listens on 127.0.0.1:--port when the
// holders are the user's. Not implemented: the other stores (--store): asked, it exits 2.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;

public final class Holder {
    static final int VERSION = 5;
    // Exit statuses (docs/holder-protocol.md).
    static final int WROTE = 0, FAILURE = 1, USAGE = 2, LEASE_LOST = 3, REJECTED = 4,
            NOT_ACQUIRED = 5, ORPHANED = 6, PROTOCOL = 7, DEADLINE = 8;

    static final String ACQUIRE = """
            INSERT INTO lease AS l (name, holder, token, expires_at)
            VALUES (?, ?, 1, now() + make_interval(secs => ?::float8 / 1000))
            ON CONFLICT (name) DO UPDATE
               SET holder = EXCLUDED.holder, token = l.token + 1, expires_at = EXCLUDED.expires_at
             WHERE l.expires_at <= now()
            RETURNING l.token""";
    static final String RENEW = """
            UPDATE lease SET expires_at = now() + make_interval(secs => ?::float8 / 1000)
             WHERE name = ? AND holder = ? AND token = ? AND expires_at > now()""";
    static final String RELEASE = """
            UPDATE lease SET expires_at = '-infinity'
             WHERE name = ? AND holder = ? AND token = ?""";
    static final String FLOOR = """
            UPDATE fence_floor SET max_token = ? WHERE scope = ? AND max_token <= ?""";
    static final String PART = """
            INSERT INTO report_part AS r (scope, part, content, writer, token)
            VALUES (?, ?, ?, ?, ?)
            ON CONFLICT (scope, part) DO UPDATE
               SET content = EXCLUDED.content, writer = EXCLUDED.writer,
                   token = EXCLUDED.token, written_at = clock_timestamp()""";
    static final String ATTEMPT = """
            INSERT INTO write_attempt (scope, part, writer, token, mode, accepted)
            VALUES (?, ?, ?, ?, ?, ?)""";

    static final BufferedReader IN =
            new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));

    /** One protocol line on stdout, whole and flushed (the renewer thread speaks too). */
    static synchronized void say(String line) {
        System.out.print(line + "\n");
        System.out.flush();
    }

    /** The next line from the lab must be GO; stdin closed: orphaned. */
    static void waitForGo() throws Exception {
        String line = IN.readLine();
        if (line == null) System.exit(ORPHANED);
        if (!line.strip().equals("GO")) {
            say("ERROR expected GO, got '" + line.strip() + "'");
            System.exit(PROTOCOL);
        }
    }

    /** The command line: --flag=value (or --flag value) and the switches; an unknown flag is exit 2. */
    static Map<String, String> flags(String[] args) {
        Set<String> switches = Set.of("--release", "--wait-before-check",
                "--wait-before-commit", "--wait-after-write");
        Set<String> valued = Set.of("--store", "--socket-dir", "--port", "--lease", "--holder",
                "--ttl-ms", "--renew-ms", "--margin-ms", "--scope", "--part", "--content",
                "--mode", "--sut", "--run-id", "--store-endpoint", "--lease-host", "--lease-port",
                "--resource-host", "--resource-port", "--loop-seed", "--loop-parts",
                "--control-scope");
        Map<String, String> f = new HashMap<>();
        for (int i = 0; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            if (switches.contains(args[i])) {
                f.put(args[i], "true");
            } else if (eq > 0 && valued.contains(args[i].substring(0, eq))) {
                f.put(args[i].substring(0, eq), args[i].substring(eq + 1));
            } else if (valued.contains(args[i]) && i + 1 < args.length) {
                f.put(args[i], args[++i]);
            } else {
                usage("unrecognized argument: " + args[i]);
            }
        }
        if (!f.getOrDefault("--store", "postgres").equals("postgres"))
            usage("--store " + f.get("--store") + ": this holder runs seed 004's table on PostgreSQL only");
        for (String needed : new String[] {"--port", "--lease", "--holder", "--ttl-ms",
                "--renew-ms", "--margin-ms", "--scope", "--mode"})
            if (!f.containsKey(needed)) usage("missing " + needed);
        return f;
    }

    static void usage(String why) {
        System.err.println("Holder.java: error: " + why);
        System.exit(USAGE);
    }

    /** A connection named after the holder: how the lab finds (and kills) its sessions. */
    static Connection connect(Map<String, String> f, String which, String db, String role)
            throws SQLException {
        String host = f.getOrDefault("--" + which + "-host", "127.0.0.1");
        String port = f.getOrDefault("--" + which + "-port", f.get("--port"));
        return DriverManager.getConnection("jdbc:postgresql://" + host + ":" + port + "/" + db
                + "?user=" + role + "&ApplicationName=" + f.get("--holder"));
    }

    /** seed 004's LeaseStore: acquire, renew and release by the database's clock. */
    static final class LeaseStore {
        final Connection conn;
        final String name, holder;
        final long ttlMs, marginMs;

        LeaseStore(Connection conn, Map<String, String> f) {
            this.conn = conn;
            this.name = f.get("--lease");
            this.holder = f.get("--holder");
            this.ttlMs = Long.parseLong(f.get("--ttl-ms"));
            this.marginMs = Long.parseLong(f.get("--margin-ms"));
        }

        /** The token granted, or -1; the local deadline runs from nanoTime read before the request. */
        long acquire(long[] deadline) throws SQLException {
            long sent = System.nanoTime();
            try (PreparedStatement s = conn.prepareStatement(ACQUIRE)) {
                s.setString(1, name);
                s.setString(2, holder);
                s.setLong(3, ttlMs);
                try (ResultSet r = s.executeQuery()) {
                    if (!r.next()) return -1;
                    deadline[0] = sent + (ttlMs - marginMs) * 1_000_000L;
                    return r.getLong(1);
                }
            }
        }

        boolean renew(long token, long[] deadline) throws SQLException {
            long sent = System.nanoTime();
            try (PreparedStatement s = conn.prepareStatement(RENEW)) {
                s.setLong(1, ttlMs);
                s.setString(2, name);
                s.setString(3, holder);
                s.setLong(4, token);
                boolean ok = s.executeUpdate() == 1;
                if (ok && deadline != null) deadline[0] = sent + (ttlMs - marginMs) * 1_000_000L;
                return ok;
            }
        }

        boolean release(long token) throws SQLException {
            try (PreparedStatement s = conn.prepareStatement(RELEASE)) {
                s.setString(1, name);
                s.setString(2, holder);
                s.setLong(3, token);
                return s.executeUpdate() == 1;
            }
        }
    }

    static void run(String[] args) throws Exception {
        Map<String, String> f = flags(args);
        String hello = IN.readLine();
        if (hello == null || !hello.strip().equals("HELLO version=" + VERSION)) {
            say("ERROR unsupported protocol: '" + hello + "' (this holder speaks version " + VERSION + ")");
            System.exit(PROTOCOL);
        }
        say("HELLO version=" + VERSION + " pid=" + ProcessHandle.current().pid());
        if (f.containsKey("--loop-seed")) {
            new Looping(f).run();
            return;
        }
        for (String needed : new String[] {"--part", "--content"})
            if (!f.containsKey(needed)) usage("missing " + needed);

        LeaseStore lease = new LeaseStore(connect(f, "lease", "lease26", "lease_svc"), f);
        Connection resource = connect(f, "resource", "res26", "resource_svc");
        long[] deadline = new long[1];
        long token = lease.acquire(deadline);
        if (token < 0) {
            say("REFUSED");
            System.exit(NOT_ACQUIRED);
        }
        say("ACQUIRED token=" + token);

        // The background renewer, on a connection of its own, named `renewer` before it starts
        // (HotSpot gives the OS thread that name): a frozen holder must show it frozen too.
        long renewMs = Long.parseLong(f.get("--renew-ms"));
        LeaseStore renewing = new LeaseStore(connect(f, "lease", "lease26", "lease_svc"), f);
        final long held = token;
        final boolean[] stop = {false};
        // Counted down once it runs: HotSpot names the OS thread before it runs the body.
        java.util.concurrent.CountDownLatch named = new java.util.concurrent.CountDownLatch(1);
        Thread renewer = new Thread(() -> {
            named.countDown();
            try {
                while (true) {
                    Thread.sleep(renewMs);
                    synchronized (stop) {
                        if (stop[0]) return;
                    }
                    boolean ok = renewing.renew(held, deadline);
                    synchronized (stop) {
                        if (stop[0]) return;
                        say("RENEWED ok=" + ok + " token=" + held);
                    }
                }
            } catch (InterruptedException | SQLException e) {
                // The holder is ending, or the lease's server went away: the deadline stands.
            }
        }, "renewer");
        renewer.setDaemon(true);
        if (renewMs > 0) {
            renewer.start();
            // On only once it is named: a thread just started may not have run yet.
            named.await();
        }

        if (f.containsKey("--wait-before-check")) {
            say("BEFORE_CHECK token=" + token + " deadline_left_ms=" + leftMs(deadline));
            waitForGo();
        }
        // The local-deadline check: an efficiency device; the fence below is what keeps I3.
        long now = System.nanoTime();
        if (now >= deadline[0]) {
            synchronized (stop) {
                stop[0] = true;
            }
            say("DEADLINE_PASSED token=" + token + " overdue_ms=" + (now - deadline[0]) / 1_000_000L);
            System.exit(DEADLINE);
        }
        say("AT_WRITE_POINT token=" + token + " deadline_left_ms=" + leftMs(deadline));
        waitForGo();

        // The write: no check of the lease here — the resource's fence decides.
        String scope = f.get("--scope"), part = f.get("--part"), holder = f.get("--holder");
        boolean unfenced = f.get("--mode").equals("unfenced");
        String mode = unfenced ? "unfenced" : "fenced-scope";
        boolean accepted;
        if (unfenced) {
            part(resource, scope, part, f.get("--content"), holder, token);
            accepted = true;
        } else {
            resource.setAutoCommit(false);
            try (PreparedStatement s = resource.prepareStatement(FLOOR)) {
                s.setLong(1, token);
                s.setString(2, scope);
                s.setLong(3, token);
                accepted = s.executeUpdate() == 1;
            }
            if (accepted) {
                part(resource, scope, part, f.get("--content"), holder, token);
                attempt(resource, scope, part, holder, token, mode, true);
                if (f.containsKey("--wait-before-commit")) {
                    say("BEFORE_COMMIT token=" + token);
                    waitForGo();
                }
                resource.commit();
            } else {
                resource.rollback(); // nothing of the write stays
            }
            resource.setAutoCommit(true);
        }
        if (unfenced || !accepted) {
            // A rejected attempt's record outlives its write's rollback.
            attempt(resource, scope, part, holder, token, mode, accepted);
        }
        synchronized (stop) {
            stop[0] = true;
        }
        say("WRITE accepted=" + accepted + " token=" + token);
        if (f.containsKey("--wait-after-write")) waitForGo();

        boolean renewed = lease.renew(token, null);
        say("RENEW_AFTER_WRITE ok=" + renewed);
        if (f.containsKey("--release")) say("RELEASED ok=" + lease.release(token));
        System.exit(!renewed ? LEASE_LOST : accepted ? WROTE : REJECTED);
    }

    /**
     * The looping form (--loop-seed, lab chaos): hold, write every part, renew, release, again —
     * each operation reported as its invocation and its completion (ok, fail, or info when an
     * error leaves its outcome unknown) until stdin closes. Its own choices (how long it works,
     * the parts' order) come from its seed; pauses, kills and crashes are the lab's business.
     */
    static final class Looping {
        final Map<String, String> f;
        final java.util.Random rng;
        final int parts;
        final long ttlMs, marginMs;
        Connection lease, resource;
        long nextId = 0;

        Looping(Map<String, String> f) {
            this.f = f;
            this.rng = new java.util.Random(Long.parseUnsignedLong(f.get("--loop-seed")));
            this.parts = Integer.parseInt(f.getOrDefault("--loop-parts", "3"));
            this.ttlMs = Long.parseLong(f.get("--ttl-ms"));
            this.marginMs = Long.parseLong(f.get("--margin-ms"));
        }

        void op(long id, String phase, String kind, long token, String scope, String part) {
            say("OP id=" + id + " phase=" + phase + " f=" + kind + " token=" + token
                    + " scope=" + scope + " part=" + part);
        }

        void work(long maxMs) throws InterruptedException {
            Thread.sleep((long) (rng.nextDouble() * maxMs));
        }

        /** A connection, opened again after an error (the cluster restarts): polled until it is. */
        Connection open(String which, String db, String role) throws InterruptedException {
            while (true) {
                try {
                    return connect(f, which, db, role);
                } catch (SQLException e) {
                    Thread.sleep(50);
                }
            }
        }

        void run() throws Exception {
            // The lab ends the loop by closing stdin.
            Thread watch = new Thread(() -> {
                try {
                    while (IN.readLine() != null) { }
                } catch (java.io.IOException e) {
                    // stdin is gone either way
                }
                Runtime.getRuntime().halt(0);
            }, "stdin");
            watch.setDaemon(true);
            watch.start();
            while (true) oneHolding();
        }

        void oneHolding() throws Exception {
            if (lease == null) lease = open("lease", "lease26", "lease_svc");
            LeaseStore store = new LeaseStore(lease, f);
            long id = ++nextId;
            op(id, "invoke", "acquire", 0, "-", "-");
            long[] deadline = new long[1];
            long token;
            try {
                token = store.acquire(deadline);
            } catch (SQLException e) {
                op(id, "info", "acquire", 0, "-", "-");
                lease = null;
                work(ttlMs / 10);
                return;
            }
            if (token < 0) {
                op(id, "fail", "acquire", 0, "-", "-");
                work(ttlMs / 10);
                return;
            }
            op(id, "ok", "acquire", token, "-", "-");
            work(ttlMs / 10);
            // The local-deadline check, asking for time enough to write every part before it.
            long perPart = ttlMs / (2L * parts);
            long neededMs = perPart * parts + 100;
            long leftMs = (deadline[0] - System.nanoTime()) / 1_000_000L;
            if (leftMs < neededMs) {
                say("DEADLINE_PASSED token=" + token + " overdue_ms=" + (neededMs - leftMs));
                return;
            }
            java.util.List<Integer> order = new java.util.ArrayList<>();
            for (int n = 1; n <= parts; n++) order.add(n);
            java.util.Collections.shuffle(order, rng);
            for (int n : order) { // no check between the parts: a pause here is what the fence is for
                work(perPart);
                write(token, f.get("--scope"), "p" + n, !f.get("--mode").equals("unfenced"));
                if (f.containsKey("--control-scope"))
                    write(token, f.get("--control-scope"), "p" + n, false);
            }
            for (String kind : new String[] {"renew", "release"}) {
                id = ++nextId;
                op(id, "invoke", kind, token, "-", "-");
                try {
                    if (lease == null) lease = open("lease", "lease26", "lease_svc");
                    store = new LeaseStore(lease, f);
                    boolean done = kind.equals("renew") ? store.renew(token, null) : store.release(token);
                    op(id, done ? "ok" : "fail", kind, token, "-", "-");
                } catch (SQLException e) {
                    lease = null;
                    op(id, "info", kind, token, "-", "-");
                }
            }
        }

        void write(long token, String scope, String part, boolean fenced) throws Exception {
            long id = ++nextId;
            op(id, "invoke", "write", token, scope, part);
            String holder = f.get("--holder");
            String content = holder + "#" + id;
            boolean accepted;
            try {
                if (resource == null) resource = open("resource", "res26", "resource_svc");
                Connection c = resource;
                if (fenced) {
                    c.setAutoCommit(false);
                    try (PreparedStatement s = c.prepareStatement(FLOOR)) {
                        s.setLong(1, token);
                        s.setString(2, scope);
                        s.setLong(3, token);
                        accepted = s.executeUpdate() == 1;
                    }
                    if (accepted) {
                        part(c, scope, part, content, holder, token);
                        attempt(c, scope, part, holder, token, "fenced-scope", true);
                        c.commit();
                    } else {
                        c.rollback();
                    }
                    c.setAutoCommit(true);
                    if (!accepted) attempt(c, scope, part, holder, token, "fenced-scope", false);
                } else {
                    part(c, scope, part, content, holder, token);
                    attempt(c, scope, part, holder, token, "unfenced", true);
                    accepted = true;
                }
            } catch (SQLException e) {
                try {
                    if (resource != null) resource.close();
                } catch (SQLException ignored) {
                    // it is being replaced
                }
                resource = null;
                op(id, "info", "write", token, scope, part);
                return;
            }
            op(id, accepted ? "ok" : "fail", "write", token, scope, part);
        }
    }

    static long leftMs(long[] deadline) {
        return Math.max(0, (deadline[0] - System.nanoTime()) / 1_000_000L);
    }

    static void part(Connection c, String scope, String part, String content, String writer,
            long token) throws SQLException {
        try (PreparedStatement s = c.prepareStatement(PART)) {
            s.setString(1, scope);
            s.setString(2, part);
            s.setString(3, content);
            s.setString(4, writer);
            s.setLong(5, token);
            s.executeUpdate();
        }
    }

    static void attempt(Connection c, String scope, String part, String writer, long token,
            String mode, boolean accepted) throws SQLException {
        try (PreparedStatement s = c.prepareStatement(ATTEMPT)) {
            s.setString(1, scope);
            s.setString(2, part);
            s.setString(3, writer);
            s.setLong(4, token);
            s.setString(5, mode);
            s.setBoolean(6, accepted);
            s.executeUpdate();
        }
    }

    public static void main(String[] args) {
        try {
            run(args);
        } catch (Exception e) {
            say("ERROR " + String.join(" ", String.valueOf(e.getMessage()).split("\\s+")));
            System.exit(FAILURE);
        }
    }
}
