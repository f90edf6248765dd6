//! The pieces experiments share, below every experiment and above the contract and the testbed:
//! the paused holder's timeline (F4, F5 and the timelines built on it), session locks (the
//! S-series), the Redlock majorities and the Redlock client (the RL-series), the U-series'
//! helpers, the lost create (F3), the stale handle (F11, F14), the token-regression finder (the
//! R-series and chaos), the latch (interleavings held at a point), and the step vocabulary
//! (`steps`: verbs that act, record their step and check, with the holders as typed names).

pub mod latch;
pub mod lost_create;
pub mod paused_holder;
pub mod redlock_client;
pub mod redlock_majorities;
pub mod regression;
pub mod session_locks;
pub mod stale_handle;
pub mod steps;
pub mod u_common;
