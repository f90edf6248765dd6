//! U2 — the source's reconciler test, on MariaDB, with A as a separate process. The fault: A
//! starts a run under fence n and is frozen (SIGSTOP) — here A is the `mariadb` command-line
//! client, its own OS process on its own connection; its lease expires; B takes over (n+1) and
//! completes its own run; A is continued and sends its "finished". Property: the completion that
//! joins the lease in the same statement affects 0 rows — a stale owner cannot finish; B's run
//! stays completed. Negative control: the same timeline with a completion that checks only the
//! run id lets A's stale "finished" through.

crate::u_common::u_scenario!(U2, "U2", 7, "stale completion (MariaDB): A is frozen mid-run, B takes over and finishes; A's completion is fenced by the lease join");

#[cfg(feature = "mariadb")]
mod imp {
    use std::time::Duration;

    use anyhow::{bail, Context as _};
    use fencing::fenced_job::{completion_script, JobLease, CONNECTION_ID_SCRIPT};
    use harness::evidence::{Mark, Recorder};
    use harness::process::{ChildProcess, Spawn, Stream};
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
    use tokio::process::{ChildStdin, ChildStdout};

    use crate::maria::MariaEnv;
    use crate::u_common::{owner_token, JOB_LEASE};
    use crate::Lab;

    const ANSWER_TIMEOUT: Duration = Duration::from_secs(15);

    /// Holder A: the `mariadb` command-line client, a separate OS process on its own connection.
    struct Client {
        process: ChildProcess,
        stdin: ChildStdin,
        lines: Lines<BufReader<ChildStdout>>,
    }

    impl Client {
        fn spawn(env: &MariaEnv) -> anyhow::Result<Client> {
            let mut process = Spawn::new("A (mariadb client)", &env.server.binaries().client)
                .args(env.client_args())
                .stdin(Stream::Piped)
                .capture_stderr()
                .spawn()?;
            let stdin = process.take_stdin().context("the client's stdin")?;
            let stdout = process.take_stdout().context("the client's stdout")?;
            Ok(Client {
                process,
                stdin,
                lines: BufReader::new(stdout).lines(),
            })
        }

        async fn send(&mut self, sql: &str) -> anyhow::Result<()> {
            self.stdin.write_all(sql.as_bytes()).await?;
            Ok(self.stdin.flush().await?)
        }

        /// The client's next output line, within a deadline.
        async fn answer(&mut self) -> anyhow::Result<String> {
            let line = tokio::time::timeout(ANSWER_TIMEOUT, self.lines.next_line())
                .await
                .context("A's client did not answer")??;
            line.context("A's client closed its output")
        }

        /// Sends a completion script and reads how many rows it changed.
        async fn complete(&mut self, script: &str) -> anyhow::Result<i64> {
            self.send(script).await?;
            let answer = self.answer().await?;
            answer
                .trim()
                .parse()
                .with_context(|| format!("A's client answered {answer:?}"))
        }
    }

    pub async fn run(lab: &mut Lab, rec: &mut Recorder) -> anyhow::Result<()> {
        let ttl = lab.params.ttl;
        let env = match lab.maria().await? {
            Ok(env) => env,
            Err(reason) => {
                rec.skip(reason);
                return Ok(());
            }
        };
        // The positive control of the client path: while A's lease is valid, the same fenced
        // completion sent the same way changes its run.
        let jobs = &env.jobs;
        let a = jobs
            .acquire(JOB_LEASE, &owner_token("A"), ttl)
            .await?
            .context("A could not acquire")?;
        jobs.start_run("run-valid", &a).await?;
        let mut client = Client::spawn(env)?;
        let rows = client
            .complete(&completion_script("run-valid", &a, true))
            .await?;
        client.process.stop(&[]).await;
        rec.check(
            "while A's lease is valid, its fenced completion through the client changes its run",
            &1,
            &rows,
        );

        lab.maria().await?.map_err(anyhow::Error::msg)?;
        let rows = timeline(lab, rec, true).await?;
        rec.check(
            "A's fenced completion affects 0 rows: lease lost, never retried",
            &0,
            &rows.a_rows,
        );
        rec.check("A's run is not marked completed", "running", &rows.a_status);
        rec.check("B's run stays completed", "completed", &rows.b_status);
        lab.maria().await?.map_err(anyhow::Error::msg)?;
        let control = timeline(lab, rec, false).await?;
        rec.expose(
            "a completion that checks only run_id lets the stale owner's \"finished\" through",
            control.a_rows == 1 && control.a_status == "completed",
            format_args!(
                "A's completion affected {} row(s); A's run is {}",
                control.a_rows, control.a_status
            ),
        );
        Ok(())
    }

    struct Rows {
        a_rows: i64,
        a_status: String,
        b_status: String,
    }

    async fn timeline(lab: &mut Lab, rec: &mut Recorder, fenced: bool) -> anyhow::Result<Rows> {
        let label = if fenced {
            "fenced completion"
        } else {
            "completion by run_id only"
        };
        rec.step(Mark::Info, "lab", label, None, "", None);
        let (short, long, timeout) = (
            lab.params.short_ttl,
            lab.params.ttl,
            lab.params.wait_timeout,
        );
        let env = lab.maria.as_ref().context("MariaDB is not running")?;
        let jobs = &env.jobs;
        let a: JobLease = jobs
            .acquire(JOB_LEASE, &owner_token("A"), short)
            .await?
            .context("A could not acquire")?;
        jobs.start_run("run-a", &a).await?;
        rec.step(
            Mark::Acquired,
            "A",
            "acquire, start run-a",
            Some(a.fence_token),
            "",
            None,
        );

        let mut client = Client::spawn(env)?;
        client.send(CONNECTION_ID_SCRIPT).await?;
        let connection = client.answer().await?;
        client.process.freeze().await?;
        // Observed again, apart from freeze()'s own post-condition.
        let threads = client.process.threads()?;
        rec.step(Mark::Frozen, "A", "SIGSTOP", None, "", None);
        if fenced {
            rec.check_that(
                format!(
                    "A is a separate process (pid {}) with its own connection, frozen",
                    client.process.pid()
                ),
                !threads.is_empty() && threads.iter().all(|t| t.state == 'T'),
                format_args!(
                    "connection id {}; threads {}",
                    connection.trim(),
                    threads
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(" ")
                ),
            );
        }
        env.until_expired(timeout).await?;
        rec.step(
            Mark::LeaseExpired,
            "A",
            "lease expired (database time)",
            Some(a.fence_token),
            "",
            None,
        );
        let b = jobs
            .acquire(JOB_LEASE, &owner_token("B"), long)
            .await?
            .context("B could not take over")?;
        if b.fence_token != a.fence_token + 1 {
            bail!(
                "B's fence token is {}, not {}",
                b.fence_token,
                a.fence_token + 1
            );
        }
        rec.step(
            Mark::Acquired,
            "B",
            "acquire",
            Some(b.fence_token),
            "",
            None,
        );
        jobs.start_run("run-b", &b).await?;
        let b_done = jobs.complete_run("run-b", &b).await?;
        rec.step(
            Mark::Write { accepted: b_done },
            "B",
            "complete run-b",
            Some(b.fence_token),
            "",
            None,
        );
        if fenced {
            rec.check("B completes its own run", &true, &b_done);
        }

        // The go-line is A's own completion, written while A is frozen; then A is continued.
        client.send(&completion_script("run-a", &a, fenced)).await?;
        client.process.thaw().await?;
        let answer = client.answer().await?;
        let a_rows: i64 = answer
            .trim()
            .parse()
            .with_context(|| format!("A's client answered {answer:?}"))?;
        rec.step(
            Mark::Write {
                accepted: a_rows == 1,
            },
            "A",
            "complete run-a",
            Some(a.fence_token),
            format!("{a_rows} row(s)"),
            None,
        );
        client.process.stop(&[]).await;
        let a_status = jobs.run_status("run-a").await?.unwrap_or_default();
        let b_status = jobs.run_status("run-b").await?.unwrap_or_default();
        rec.note(format!(
            "{label}: A's completion affected {a_rows} row(s); run-a {a_status}, run-b {b_status}"
        ));
        Ok(Rows {
            a_rows,
            a_status,
            b_status,
        })
    }
}
