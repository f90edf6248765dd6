//! Profiles: a system under test described as data — its lease table with the four statements on
//! it, and the resource's fence with its write — in a TOML file. The lab's own design
//! ships as the built-in profiles `seed004`, `seed004-single` and `seed004-shared` (the files in
//! `fencing/profiles/`, compiled in): the SQL lease store and the resource run their
//! statements, so the SQL of the lab's fence lives in those
//! files and nowhere else. A profile with `dialect = "mariadb"` is the other shape, seed 000's
//! job lease and the runs it fences ([`JobProfile`], built in as `seed000`, run by the U-series);
//! [`Sut`] is either, as `--sut` names it.
//!
//! A statement names its parameters `:name`; [`Statement::compile`] turns them into PostgreSQL's
//! `$1`, `$2`, … in its place's order of parameters (on MariaDB a `?` at each place) and refuses
//! a name the place does not offer ([`Slot`]). A profile is refused before anything runs, with
//! one line naming the file and the statement: [`Sut::parse`] judges its form (TOML syntax, a
//! missing or unknown key, a parameter), [`Profile::prepare`] its SQL (every statement prepared
//! against scratch databases that hold its schema, the server's own error quoted; a MariaDB
//! profile's `JobProfile::prepare` is in `fenced_job`).
//!
//! One concern a file: `statement.rs` lexes and binds a statement, `parse.rs` reads the TOML
//! form and holds the built-ins, `job.rs` is the MariaDB shape; `crate::prepare` asks the server.
//! The dependencies go one way: this module uses nothing of the crate beyond itself, the stores
//! (`lease`, `resource`, `schema`) use its data types, and only `crate::prepare` uses a store's
//! module. This
//! file holds no code of its own: it names the public API, which callers reach as
//! `fencing::profile::…` whichever file holds it.

mod job_profile;
mod parse;
mod statement;

pub use job_profile::{JobProfile, RunSql};
pub use parse::{Claims, LeaseSql, Profile, ProfileError, ResourceSql, Sut, WriteSql};
pub use statement::{Args, Dialect, Param, Slot, Statement};

// What `job.rs` shares with the PostgreSQL shape's parsing (it reaches them as `super::…`).
use parse::{is_built_in_origin, load_arg_of, not_this_series, toml_error};
