//! The holder binary: one lease holder as its own OS process (SPEC §4 "Holder process").
//!
//! Placeholder: the holder arrives with issue 3.
fn main() {}
