//! `lab exercise`: a starting profile for a student — one of the seeds' designs (`seed004`, or
//! `seed000` on MariaDB) with one flaw planted in its SQL, or a template with every statement
//! left to write — and the command that shows whether it holds (`lab run --sut FILE`).

use std::path::{Path, PathBuf};

use crate::{print_or_fail, Ended};

/// An exercise: its name, the design it starts from, what the student is told, and the planted
/// flaw (the text of that design it replaces, and with what). `None`: the template.
struct Exercise {
    name: &'static str,
    base: &'static str,
    task: &'static str,
    flaw: Option<(&'static str, &'static str)>,
    /// The experiments that tell.
    run: &'static str,
}

const EXERCISES: [Exercise; 5] = [
    Exercise {
        name: "stale-write",
        base: "seed004",
        task: "A paused old holder's write gets through this resource. Find the statement that \
               lets it, and fix it.",
        flaw: Some((
            "UPDATE fence_floor SET max_token = :token WHERE scope = :scope AND max_token <= :token",
            "UPDATE fence_floor SET max_token = :token WHERE scope = :scope",
        )),
        // F2 with them: a fix that makes the check `<` rejects a holder's own next write, and
        // F2 says why equal tokens must pass.
        run: "F2,F4,F6,F7",
    },
    Exercise {
        name: "same-token",
        base: "seed004",
        task: "After a takeover, the new holder and the old one can no longer be told apart by \
               the resource. Find why, and fix it.",
        flaw: Some(("       token = l.token + 1,", "       token = l.token,")),
        run: "F1,F4,F8",
    },
    Exercise {
        name: "early-takeover",
        base: "seed004",
        task: "A second holder gets the lease while the first one's is still valid by the \
               database's clock. Find why, and fix it.",
        flaw: Some((
            " WHERE l.expires_at <= now()",
            " WHERE l.expires_at <= now() + interval '1 second'",
        )),
        run: "F1,F2,F3",
    },
    Exercise {
        name: "stale-completion",
        base: "seed000",
        task: "An instance that takes the job lease again finishes the run of its old holding \
               (MariaDB). Find what the completion does not check, and fix it.",
        flaw: Some((
            "   AND r.fence_token = l.fence_token AND l.fence_token = :token\n",
            "",
        )),
        run: "U2,U4",
    },
    Exercise {
        name: "template",
        base: "seed004",
        task: "Write every statement of a lease with fencing tokens and of a fenced resource \
               write; `lab profile check` tells you what the server thinks of each.",
        flaw: None,
        run: "F1,F4,F6,F7",
    },
];

/// A built-in design's file: an exercise starts from it.
fn built_in(name: &str) -> &'static str {
    fencing::profile::Profile::built_in_text(name).expect("the exercise's design is built in")
}

/// The lab's own design as its built-in file: the template is made from it.
fn seed004() -> &'static str {
    built_in("seed004")
}

/// The exercise's file text.
fn text(e: &Exercise, path: &Path) -> String {
    let body = match e.flaw {
        Some((from, to)) => built_in(e.base).replacen(from, to, 1),
        None => template(),
    };
    let body = body.replacen(
        &format!("name = \"{}\"", e.base),
        &format!("name = \"{}\"", e.name),
        1,
    );
    format!(
        "# Exercise {name}: {task}\n#\n# Check it:   lab profile check {path}\n# Run it:     lab run --only {run} --sut {path}\n#\n# The experiments' FAIL lines are the evidence; when they all pass, the design holds against\n# those faults.\n#\n{body}",
        name = e.name,
        task = e.task,
        path = path.display(),
        run = e.run,
    )
}

/// Every exercise with a planted flaw, as the file `lab exercise` writes into `dir`: name and
/// text (`lab grade` shows each as a design known to be flawed).
pub fn flawed(dir: &Path) -> Vec<(&'static str, String)> {
    EXERCISES
        .iter()
        .filter(|e| e.flaw.is_some())
        .map(|e| (e.name, text(e, &dir.join(format!("{}.toml", e.name)))))
        .collect()
}

/// seed004 with every statement emptied (its comments say what each must do).
fn template() -> String {
    let mut out = String::new();
    let mut in_statement = false;
    for line in seed004().lines() {
        let key_opens = line.contains(" = \"\"\"") && !line.starts_with('#');
        if key_opens && !line.starts_with("schema") {
            out.push_str(line);
            out.push('\n');
            out.push_str("-- your statement here\n");
            in_statement = true;
            continue;
        }
        if in_statement {
            if line.starts_with("\"\"\"") {
                out.push_str(line);
                out.push('\n');
                in_statement = false;
            }
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

pub fn run(name: Option<String>, out: Option<PathBuf>) -> Ended {
    let Some(name) = name else {
        let list: String = EXERCISES
            .iter()
            .map(|e| format!("{:<16} {}\n", e.name, e.task))
            .collect();
        return print_or_fail(&list);
    };
    let Some(e) = EXERCISES.iter().find(|e| e.name == name) else {
        let names: Vec<_> = EXERCISES.iter().map(|e| e.name).collect();
        eprintln!(
            "lab exercise: no exercise {name:?}; there are {}",
            names.join(", ")
        );
        return Ended::CouldNotRun;
    };
    let path = out.unwrap_or_else(|| PathBuf::from(format!("{name}.toml")));
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path);
    let written = file.and_then(|mut f| {
        use std::io::Write as _;
        f.write_all(text(e, &path).as_bytes())
    });
    match written {
        Ok(()) => print_or_fail(&format!(
            "lab exercise: wrote {}: {}\n  lab run --only {} --sut {}\n",
            path.display(),
            e.task,
            e.run,
            path.display()
        )),
        Err(err) => {
            eprintln!(
                "lab exercise: {}: {err} (an existing file is never overwritten; pass --out)",
                path.display()
            );
            Ended::CouldNotRun
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_planted_flaw_is_found_once_and_every_exercise_parses_or_says_what_is_missing() {
        for e in &EXERCISES {
            let text = text(e, Path::new("x.toml"));
            match e.flaw {
                Some((from, to)) => {
                    assert_eq!(built_in(e.base).matches(from).count(), 1, "{}", e.name);
                    assert!(text.contains(to), "{}", e.name);
                    let p = fencing::profile::Sut::parse("x.toml", &text).expect(e.name);
                    assert_eq!(p.name(), e.name);
                    assert_eq!(p.origin(), "x.toml");
                }
                None => {
                    // The template's statements are placeholders: it does not parse until they
                    // are written, and says which one is first.
                    let err = fencing::profile::Profile::parse("x.toml", &text).unwrap_err();
                    assert!(err.to_string().contains("lease.acquire"), "{err}");
                }
            }
        }
    }
}
