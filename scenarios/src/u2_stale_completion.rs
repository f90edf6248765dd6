//! U2 — the source's reconciler test, on MariaDB, with A as a separate process. The fault: A
//! starts a run under fence n and is frozen (SIGSTOP) — here A is the `mariadb` command-line
//! client, its own OS process on its own connection; its lease expires; B takes over (n+1) and
//! completes its own run; A is continued and sends its "finished". Property: the completion that
//! joins the lease in the same statement affects 0 rows — a stale owner cannot finish; B's run
//! stays completed. Negative control: the same timeline with a completion that checks only the
//! run id lets A's stale "finished" through.

crate::u_common::u_scenario!(U2, "U2", "stale completion (MariaDB): A is frozen mid-run, B takes over and finishes; A's completion is fenced by the lease join");

#[cfg(feature = "mariadb")]
mod imp {
    use std::time::Duration;

    use anyhow::{bail, Context as _};
    use fencing::fenced_job::completion_script;
    use harness::evidence::{Mark, Recorder};
    use harness::process::ChildProcess;
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    use crate::u_common::{owner_token, JOB_LEASE};
    use crate::Lab;

    const ANSWER_TIMEOUT: Duration = Duration::from_secs(15);

    pub async fn run(lab: &mut Lab, rec: &mut Recorder) -> anyhow::Result<()> {
        if let Err(reason) = lab.maria().await? {
            rec.skip(reason);
            return Ok(());
        }
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
        let a = jobs
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

        let mut client = ChildProcess::spawn(
            "A (mariadb client)",
            &env.server.binaries().client,
            &env.client_args(),
        )?;
        let mut stdin = client
            .child_mut()
            .stdin
            .take()
            .context("the client's stdin")?;
        let mut lines = BufReader::new(
            client
                .child_mut()
                .stdout
                .take()
                .context("the client's stdout")?,
        )
        .lines();
        stdin.write_all(b"SELECT CONNECTION_ID();\n").await?;
        let connection = tokio::time::timeout(ANSWER_TIMEOUT, lines.next_line())
            .await
            .context("A's client said nothing")??;
        let frozen = client.freeze().await?;
        rec.step(Mark::Frozen, "A", "SIGSTOP", None, "", None);
        if fenced {
            rec.check_that(
                format!(
                    "A is a separate process (pid {}) with its own connection, frozen",
                    client.pid()
                ),
                frozen.iter().all(|t| t.state == 'T') && connection.is_some(),
                format_args!(
                    "connection id {}; threads {}",
                    connection.unwrap_or_default(),
                    frozen.len()
                ),
            );
        }
        harness::wait::until(
            "A's job lease is expired by CURRENT_TIMESTAMP(3)",
            timeout,
            || jobs.is_free(JOB_LEASE),
        )
        .await?;
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
        stdin
            .write_all(completion_script("run-a", &a, fenced).as_bytes())
            .await?;
        stdin.flush().await?;
        client.thaw().await?;
        let answer = tokio::time::timeout(ANSWER_TIMEOUT, lines.next_line())
            .await
            .context("A's client did not answer")??;
        let a_rows: i64 = answer
            .as_deref()
            .unwrap_or("")
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
        drop(stdin);
        client.kill().await;
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
