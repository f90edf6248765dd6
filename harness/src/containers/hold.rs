//! A request held in the network ([`Hold`]): an iptables DROP rule on this host for one TCP
//! connection's source port, commented with the run's mark, lifted later (or on drop); the
//! connection's retransmission state as `ss` reports it ([`tcp_state`]); and the removal of the
//! rules a lab killed outright left ([`remove_held_rules`]). It touches no container and sends
//! no signal: the host's packet filter is all it changes.

use std::net::IpAddr;

use super::leftovers::lab_alive;
use super::{run, ContainerError, Spawn, CLI_TIMEOUT, LABEL};

/// A request held in the network: this host drops every packet of one TCP connection — from
/// its source port `sport` to `dst` — until the hold is lifted; then TCP's next retransmission
/// delivers what was sent meanwhile. The request left the client when the client sent it and
/// reaches the server only after [`Hold::lift`]: what a partition of that length, or a network
/// that delays it, does to a request in flight.
///
/// Why not netem: this machine kind's kernel has no `sch_netem` (nor `sch_prio`, nor TC actions);
/// `tc qdisc add … netem` answers "Specified qdisc kind is unknown". The hold is an iptables rule
/// in the host's OUTPUT chain, commented with the run's mark so that a lab killed outright leaves
/// nothing that [`remove_held_rules`] cannot find.
#[derive(Debug)]
pub struct Hold {
    rule: Vec<String>,
    lifted: bool,
}

impl Hold {
    /// Starts holding; returns the hold and the rule as iptables lists it.
    pub async fn start(
        dst: IpAddr,
        sport: u16,
        mark: &str,
    ) -> Result<(Hold, String), ContainerError> {
        let rule: Vec<String> = [
            "OUTPUT",
            "-d",
            &dst.to_string(),
            "-p",
            "tcp",
            "--sport",
            &sport.to_string(),
            "-m",
            "comment",
            "--comment",
            &format!("{LABEL}={mark}"),
            "-j",
            "DROP",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        Hold::insert(rule).await
    }

    /// Starts holding every TCP packet to `dst:dport` sent by processes of the user `uid` —
    /// the connections such a process has and every one it opens meanwhile; returns the hold
    /// and the rule as iptables lists it.
    pub async fn start_for_owner(
        dst: IpAddr,
        dport: u16,
        uid: u32,
        mark: &str,
    ) -> Result<(Hold, String), ContainerError> {
        let rule: Vec<String> = [
            "OUTPUT",
            "-d",
            &dst.to_string(),
            "-p",
            "tcp",
            "--dport",
            &dport.to_string(),
            "-m",
            "owner",
            "--uid-owner",
            &uid.to_string(),
            "-m",
            "comment",
            "--comment",
            &format!("{LABEL}={mark}"),
            "-j",
            "DROP",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        Hold::insert(rule).await
    }

    /// Puts `rule` (an OUTPUT chain rule, as `iptables -I` takes it) first in the chain; the
    /// hold and the rule as iptables lists it.
    async fn insert(rule: Vec<String>) -> Result<(Hold, String), ContainerError> {
        let mut add = vec!["-I"];
        add.extend(rule.iter().map(String::as_str));
        run("iptables -I", "iptables", &add, CLI_TIMEOUT).await?;
        let hold = Hold {
            rule,
            lifted: false,
        };
        let shown = hold.listed().await;
        Ok((hold, shown))
    }

    /// The rule with its counters, as `iptables -L OUTPUT -v -n` lists it.
    pub async fn listed(&self) -> String {
        let listing = run(
            "iptables -L",
            "iptables",
            &["-L", "OUTPUT", "-v", "-n", "-x"],
            CLI_TIMEOUT,
        )
        .await
        .unwrap_or_default();
        let mark = self.rule.iter().rev().nth(2).cloned().unwrap_or_default();
        listing
            .lines()
            .find(|l| l.contains(&mark))
            .unwrap_or("")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Lifts the hold: the next retransmission gets through.
    pub async fn lift(mut self) -> Result<(), ContainerError> {
        self.lifted = true;
        let mut del = vec!["-D"];
        del.extend(self.rule.iter().map(String::as_str));
        run("iptables -D", "iptables", &del, CLI_TIMEOUT)
            .await
            .map(|_| ())
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        if !self.lifted {
            let _ = Spawn::new("iptables -D", "iptables")
                .arg("-D")
                .args(&self.rule)
                .output_blocking();
        }
    }
}

/// The TCP connection of this host from `sport` to `dst` as `ss -tin` reports it, reduced to
/// what says whether and when it retransmits: its state, the bytes in its send queue, and the
/// kernel's retransmission figures (`rto` and `lastsnd` in ms, `backoff` the number of doublings
/// of the timeout). Empty when there is no such connection.
pub async fn tcp_state(dst: IpAddr, sport: u16) -> String {
    let filter = format!("sport = :{sport}");
    let dst = dst.to_string();
    let line = run(
        "ss -tin",
        "ss",
        &["-tinH", "state", "all", "dst", &dst, &filter],
        CLI_TIMEOUT,
    )
    .await
    .unwrap_or_default();
    let words: Vec<&str> = line.split_whitespace().collect();
    let [state, _recv_q, send_q, ..] = words[..] else {
        return String::new();
    };
    const KEPT: [&str; 6] = [
        "rto:", "backoff:", "retrans:", "unacked:", "lastsnd:", "notsent:",
    ];
    let kept = words
        .iter()
        .filter(|w| KEPT.iter().any(|k| w.starts_with(k)));
    std::iter::once(format!("{state} send-q:{send_q}"))
        .chain(kept.map(|w| w.to_string()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Removes the hold rules with the lab's comment — this run's (`mark`), or any run's when `None`
/// (what a lab killed outright left); how many.
pub async fn remove_held_rules(mark: Option<&str>) -> usize {
    let needle = match mark {
        Some(m) => format!("{LABEL}={m}"),
        None => LABEL.to_owned(),
    };
    let rules = run("iptables -S", "iptables", &["-S", "OUTPUT"], CLI_TIMEOUT)
        .await
        .unwrap_or_default();
    let mut removed = 0;
    let dead_lab = |line: &str| {
        line.split(&format!("{LABEL}="))
            .nth(1)
            .and_then(|rest| rest.split(['"', ' ']).next())
            .is_some_and(|m| !lab_alive(m))
    };
    for line in rules
        .lines()
        .filter(|l| l.contains(&needle) && l.starts_with("-A ") && (mark.is_some() || dead_lab(l)))
    {
        let args: Vec<String> = line[3..]
            .split_whitespace()
            .map(|a| a.trim_matches('"').to_owned())
            .collect();
        let mut del = vec!["-D".to_owned()];
        del.extend(args);
        let del: Vec<&str> = del.iter().map(String::as_str).collect();
        if run("iptables -D", "iptables", &del, CLI_TIMEOUT)
            .await
            .is_ok()
        {
            removed += 1;
        }
    }
    removed
}
