// A library holder of the fencing lab in Java: Apache Curator's InterProcessMutex on ZooKeeper,
// the most used ZooKeeper lock, as Curator's docs show it (a CuratorFramework started, then
// `new InterProcessMutex(client, path)`, `acquire`, `release`), speaking the holder protocol's
// library lines (docs/holder-protocol.md, version 5) — the Java twin of libholder.py. Started by
// curator_mutex.sh beside it, with Debian's libcurator-recipes-java and PostgreSQL JDBC driver.
//
// The session timeout is the lab's TTL. The lock node's data is the holder's id (Curator's
// builder `defaultData`: its default is the host's address, the same for every holder here).
// Its fence: the lock node's czxid, read with the same client — Curator keeps the node's path
// behind a protected getLockPath(), which the small subclass below makes public. Its own
// question: `mutex.isOwnedByCurrentThread()`, a map in the JVM (InterProcessMutex.java), not a
// question to the server. JDBC cannot use PostgreSQL's Unix socket: the lab's cluster listens on
// 127.0.0.1:--port too for `lab library`.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.RetryOneTime;

public final class CuratorMutex {
    static final int VERSION = 5;
    static final int WROTE = 0, FAILURE = 1, USAGE = 2, LEASE_LOST = 3, REJECTED = 4,
            NOT_ACQUIRED = 5, ORPHANED = 6, PROTOCOL = 7, CHECK_FAILED = 8;
    static final String QUESTION = "mutex.isOwnedByCurrentThread()";

    static final String FLOOR = "UPDATE fence_floor SET max_token = ? WHERE scope = ? AND max_token <= ?";
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

    /** The mutex with its lock node's path in reach (Curator keeps it protected). */
    static final class Mutex extends InterProcessMutex {
        Mutex(CuratorFramework client, String path) {
            super(client, path);
        }

        String node() {
            return getLockPath();
        }
    }

    static synchronized void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    static void waitForGo() throws Exception {
        String line = IN.readLine();
        if (line == null) System.exit(ORPHANED);
        if (!line.strip().equals("GO")) {
            say("ERROR expected GO, got '" + line.strip() + "'");
            System.exit(PROTOCOL);
        }
    }

    /** What a call did, as the card quotes it: `returned X` or `raised E: msg`, one line. */
    static String quoted(Callable<Object> call) {
        String said;
        try {
            Object value = call.call();
            said = "returned " + (value == null ? "(void)" : value);
        } catch (Exception e) {
            said = "raised " + e.getClass().getSimpleName() + ": " + e.getMessage();
        }
        said = said.replaceAll("\\s+", " ");
        return said.length() <= 200 ? said : said.substring(0, 199) + "…";
    }

    static Map<String, String> flags(String[] args) {
        Map<String, String> f = new HashMap<>();
        for (String a : args) {
            if (!a.startsWith("--")) usage("unexpected argument " + a);
            int eq = a.indexOf('=');
            f.put(eq < 0 ? a : a.substring(0, eq), eq < 0 ? "" : a.substring(eq + 1));
        }
        for (String flag : f.keySet())
            if (flag.equals("--wait-before-commit") || flag.equals("--loop-seed"))
                usage(flag + ": not a fault point of this holder");
        if (!"zookeeper".equals(f.get("--store")))
            usage("--store " + f.get("--store") + ": this holder is Curator on zookeeper");
        for (String needed : new String[] {"--store-endpoint", "--port", "--lease", "--holder",
                "--ttl-ms", "--scope", "--part", "--content", "--mode"})
            if (!f.containsKey(needed)) usage("missing " + needed);
        return f;
    }

    static void usage(String why) {
        System.err.println("CuratorMutex.java: error: " + why);
        System.exit(USAGE);
    }

    /** The guarded write, fenced by the token unless --mode unfenced; whether it was accepted. */
    static boolean write(Map<String, String> f, long token) throws Exception {
        try (Connection c = DriverManager.getConnection("jdbc:postgresql://127.0.0.1:"
                + f.get("--port") + "/res26?user=resource_svc&ApplicationName=" + f.get("--holder"))) {
            boolean fenced = !f.get("--mode").equals("unfenced");
            boolean accepted = true;
            if (fenced) {
                c.setAutoCommit(false);
                try (PreparedStatement s = c.prepareStatement(FLOOR)) {
                    s.setLong(1, token);
                    s.setString(2, f.get("--scope"));
                    s.setLong(3, token);
                    accepted = s.executeUpdate() == 1;
                }
            }
            if (accepted) {
                try (PreparedStatement s = c.prepareStatement(PART)) {
                    s.setString(1, f.get("--scope"));
                    s.setString(2, f.get("--part"));
                    s.setString(3, f.get("--content"));
                    s.setString(4, f.get("--holder"));
                    s.setLong(5, token);
                    s.executeUpdate();
                }
            }
            if (fenced) {
                if (accepted) c.commit(); else c.rollback();
                c.setAutoCommit(true);
            }
            try (PreparedStatement s = c.prepareStatement(ATTEMPT)) {
                s.setString(1, f.get("--scope"));
                s.setString(2, f.get("--part"));
                s.setString(3, f.get("--holder"));
                s.setLong(4, token);
                s.setString(5, fenced ? "fenced-scope" : "unfenced");
                s.setBoolean(6, accepted);
                s.executeUpdate();
            }
            return accepted;
        }
    }

    public static void main(String[] args) {
        Map<String, String> f = flags(args);
        try {
            String hello = IN.readLine();
            if (hello == null || !hello.strip().equals("HELLO version=" + VERSION)) {
                say("ERROR unsupported protocol: '" + hello + "' (this holder speaks version " + VERSION + ")");
                System.exit(PROTOCOL);
            }
            say("HELLO version=" + VERSION + " pid=" + ProcessHandle.current().pid());
            int ttl = Integer.parseInt(f.get("--ttl-ms"));
            CuratorFramework client = CuratorFrameworkFactory.builder()
                    .connectString(f.get("--store-endpoint"))
                    .sessionTimeoutMs(ttl)
                    .connectionTimeoutMs(3000)
                    .retryPolicy(new RetryOneTime(100))
                    .defaultData(f.get("--holder").getBytes(StandardCharsets.UTF_8))
                    .build();
            client.start();
            if (!client.blockUntilConnected(10, TimeUnit.SECONDS)) {
                say("ERROR no connection to ZooKeeper at " + f.get("--store-endpoint") + " within 10 s");
                System.exit(FAILURE);
            }
            String path = "/lab-locks/curator/" + f.get("--lease");
            Mutex mutex = new Mutex(client, path);
            long sent = System.nanoTime();
            if (!mutex.acquire(0, TimeUnit.MILLISECONDS)) {
                say("REFUSED");
                client.close();
                System.exit(NOT_ACQUIRED);
            }
            long token = client.checkExists().forPath(mutex.node()).getCzxid();
            say("ACQUIRED token=" + token);
            say("HOLDING key=" + path + " owner=" + f.get("--holder"));
            long left = Math.max(0, ttl - (System.nanoTime() - sent) / 1_000_000L);
            Callable<Object> ask = () -> mutex.isOwnedByCurrentThread();
            if (f.containsKey("--wait-before-check")) {
                say("BEFORE_CHECK token=" + token + " deadline_left_ms=" + left);
                waitForGo();
                String answer = quoted(ask);
                say("ASKED question=" + QUESTION + " answer=" + answer);
                if (!answer.equals("returned true")) System.exit(CHECK_FAILED);
                say("AT_WRITE_POINT token=" + token + " deadline_left_ms=0");
                waitForGo();
            } else {
                say("AT_WRITE_POINT token=" + token + " deadline_left_ms=" + left);
                waitForGo();
                say("ASKED question=" + QUESTION + " answer=" + quoted(ask));
            }
            boolean accepted = write(f, token);
            say("WRITE accepted=" + accepted + " token=" + token);
            if (f.containsKey("--wait-after-write")) waitForGo();
            String said = quoted(() -> {
                mutex.release();
                return null;
            });
            boolean released = said.startsWith("returned");
            say("RELEASE_ENDED ok=" + released + " said=" + said);
            client.close();
            System.exit(!accepted ? REJECTED : released ? WROTE : LEASE_LOST);
        } catch (Exception e) {
            e.printStackTrace();
            say("ERROR " + (e.getClass().getSimpleName() + ": " + e.getMessage()).replaceAll("\\s+", " "));
            System.exit(FAILURE);
        }
    }
}
