//! Patroni's replication modes, named here — outside the `containers` feature — so that the
//! command line and the backend can name the lease store's mode in every build
//! (`harness::containers::patroni` runs them).

/// Patroni's replication mode (`synchronous_mode` in its dynamic configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Replication {
    /// Patroni's default: asynchronous; a replica may be promoted if it lags the last known
    /// leader position by at most `maximum_lag_on_failover`.
    Asynchronous,
    /// `synchronous_mode: true`: a commit waits for one synchronous standby, and only it may be
    /// promoted; with no healthy standby Patroni lets commits go on without one.
    Synchronous,
    /// `synchronous_mode_strict: true` as well: commits wait even with no standby at all.
    SynchronousStrict,
}

impl Replication {
    pub const ALL: [Replication; 3] = [
        Replication::Asynchronous,
        Replication::Synchronous,
        Replication::SynchronousStrict,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Replication::Asynchronous => "asynchronous",
            Replication::Synchronous => "synchronous_mode",
            Replication::SynchronousStrict => "synchronous_mode_strict",
        }
    }
}

impl std::fmt::Display for Replication {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
