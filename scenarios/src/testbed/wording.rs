//! How the evidence words what the lab reads: a lease's state, a grant, a write, an optional
//! value; the checks of a token or a floor judged by their order in the seed's numbering (or
//! waived, with why, for a design that keeps neither). It formats and checks; it starts nothing.

use harness::evidence::Recorder;

use super::{Testbed, SCOPE};

/// A lease row as the checks show it: its holder, its token and the database's verdict on it —
/// `holder-a token=1 unexpired`, or `released` once given up, `expired` once run out.
pub fn lease_state(r: &fencing::lease::Holding) -> String {
    let state = if r.released {
        "released"
    } else if r.expired {
        "expired"
    } else {
        "unexpired"
    };
    format!("{} token={} {state}", r.holder, r.token)
}

impl Testbed {
    /// The clock that decides expiry, as the evidence names it: `the database clock` for the
    /// lease table, the lock service's own otherwise.
    pub fn expiry_clock(&self) -> &'static str {
        use fencing::lease::Service;
        match self.case.store.service() {
            None => "the database clock",
            Some(Service::Redis) => "Redis's clock",
            Some(Service::Etcd) => "etcd's leader",
            Some(Service::Mariadb) => "the MariaDB server",
            Some(Service::Zookeeper) => "the ZooKeeper server",
        }
    }

    /// The token the grant the seed numbers `n` carries in this case: the store's token a
    /// passing check bound to `n` (`rec.token`: tokens are judged by order, not by seed 004's
    /// numbering), `0` for a design without a token at the lease (its profile's contract; the
    /// lease store refuses any other answer, and the recorder shows such a run's tokens as
    /// `token=–`).
    pub fn token(&self, rec: &Recorder, n: i64) -> i64 {
        if self.issues_tokens() {
            rec.token(n)
        } else {
            0
        }
    }

    /// Whether the case's grants carry a token: the design claims one at the lease and its
    /// lease store issues one (not `redis-plain`, `pg-advisory`, `mariadb-getlock`).
    pub fn issues_tokens(&self) -> bool {
        let store_has_token =
            fencing::stores::store_kind(self.case.store).is_none_or(|k| k.has_token);
        self.case.sut.claims.token_at_lease && store_has_token
    }

    /// Checks the scope's fence floor against `expected`, the seed's number of the grant whose
    /// token it must hold (judged by order, [`Recorder::check_token`]) — or, for a design whose resource
    /// keeps no floor (its profile has no `resource.floor`), records the check as waived, with
    /// why.
    pub async fn check_floor(
        &self,
        rec: &mut Recorder,
        description: &str,
        expected: i64,
    ) -> anyhow::Result<()> {
        let floor = self.resource.floor(SCOPE).await?;
        self.check_floor_is(rec, description, expected, floor);
        Ok(())
    }

    /// A floor as a check's text shows it: the value (or `none`), or `n/a` for a design whose
    /// resource keeps no floor — on both sides of a check that compares more than the floor.
    pub fn floor_shown(&self, floor: Option<i64>) -> String {
        if self.case.sut.resource.floor.is_none() {
            "n/a".into()
        } else {
            shown(floor)
        }
    }

    /// [`Testbed::check_floor`] on a floor read before (`None` for a design that keeps none).
    pub fn check_floor_is(
        &self,
        rec: &mut Recorder,
        description: &str,
        expected: i64,
        floor: Option<i64>,
    ) {
        if self.case.sut.resource.floor.is_none() {
            rec.waive(description, NO_FLOOR);
        } else if !self.issues_tokens() {
            // Fed no token, the floor holds 0 whatever happened: nothing for it to show.
            rec.waive(description, self.no_token());
        } else {
            rec.check_token(description, expected, floor);
        }
    }
}

impl Testbed {
    /// Checks a token read from the lease against `expected`, the seed's number of the grant
    /// (judged by order, [`Recorder::check_token`]) — or, for a design that issues no
    /// token (`token_at_lease = false`), records the check as waived, with why.
    pub fn check_token(
        &self,
        rec: &mut Recorder,
        description: impl Into<String>,
        expected: i64,
        actual: Option<i64>,
    ) {
        let description = description.into();
        if self.issues_tokens() {
            rec.check_token(description, expected, actual);
        } else {
            rec.waive(description, self.no_token());
        }
    }

    /// Why a check that reads a token is waived in this case: the design, or its lease store,
    /// issues none.
    fn no_token(&self) -> String {
        if self.case.sut.claims.token_at_lease {
            format!("the lease store {} issues no token", self.case.store)
        } else {
            NO_TOKEN.to_owned()
        }
    }
}

/// Why a token check is waived.
pub const NO_TOKEN: &str = "the design issues no token (token_at_lease = false)";

/// Why a floor check is waived.
pub const NO_FLOOR: &str = "the design keeps no floor at the resource (no resource.floor)";

/// The timeline mark of an acquire's result.
pub fn acquire_mark(grant: Option<&fencing::lease::Grant>) -> harness::evidence::Mark {
    match grant {
        Some(_) => harness::evidence::Mark::Acquired,
        None => harness::evidence::Mark::Refused,
    }
}

/// How the evidence names an acquire's result: `ACQUIRED token=N` or `REFUSED`.
pub fn acquired(grant: Option<&fencing::lease::Grant>) -> String {
    match grant {
        Some(g) => format!("ACQUIRED token={}", g.token),
        None => "REFUSED".into(),
    }
}

/// How the evidence names a write's result: `WRITE accepted=BOOL token=N`.
pub fn wrote(accepted: bool, token: i64) -> String {
    format!("WRITE accepted={accepted} token={token}")
}

/// An optional value as the evidence shows it: the value, or `none`.
pub fn shown<T: std::fmt::Display>(value: Option<T>) -> String {
    value.map_or_else(|| "none".into(), |v| v.to_string())
}
