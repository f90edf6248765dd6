//! What a library's own docs or source say its ownership question answers, read from the
//! installed package — a Python docstring, or the source when it has none (a method's body, the
//! lines that set a field) — and the card's reading of the runs against it. A JVM library's jar
//! ships no javadoc: its text is quoted from the library's source, with where it was read.

use std::time::Duration;

use harness::process::Spawn;

use super::{Installed, Library};

/// Where the lab reads what a library says its question answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Docs {
    /// In the installed Python package: `module:Class.attribute`.
    Python(&'static str),
    /// Quoted from the library's source, for an installed form that carries no docs.
    Quoted {
        text: &'static str,
        from: &'static str,
    },
}

/// Reads the docstring of `module:Class.attribute` (its paragraphs before any example, up to 320
/// characters), says which class defines it when the class named does not, and, with no
/// docstring, quotes the source: a method's body, or the lines of the class that set a field.
const READ_DOCS: &str = r#"
import importlib, inspect, os, sys
module, _, path = sys.argv[1].partition(":")
cls_path, _, attr = path.rpartition(".")
cls = importlib.import_module(module)
for part in cls_path.split("."):
    cls = getattr(cls, part)
name = f"{module}.{cls_path}.{attr}"
owner = next((c for c in cls.__mro__ if attr in c.__dict__), None)
def squeeze(text):
    return " ".join(text.split())
if owner is None:
    src, first = inspect.getsourcelines(cls)
    where = os.path.relpath(inspect.getsourcefile(cls), os.path.dirname(os.path.dirname(inspect.getsourcefile(importlib.import_module(module.split(".")[0])))))
    sets = [f":{first + i} `{line.strip()}`" for i, line in enumerate(src) if f"self.{attr} =" in line]
    print(f"`{name}` is a field, not a method: its source sets it at {where}" + ", ".join(sets))
    sys.exit(0)
member = owner.__dict__[attr]
inherited = "" if owner is cls else f" (not defined by {module}.{cls_path}: {owner.__module__}.{owner.__qualname__}'s)"
doc = inspect.getdoc(getattr(cls, attr))
if doc:
    paragraphs = [p for p in doc.split("\n\n") if ">>>" not in p and not p.strip().startswith(("Usage", ".."))]
    text = squeeze(" ".join(paragraphs))
    cut = "…" if len(text) > 320 else ""
    print(f"`{name}`{inherited}, its docstring: “{text[:320]}{cut}”")
else:
    body = squeeze(inspect.getsource(member))
    cut = "…" if len(body) > 320 else ""
    print(f"`{name}`{inherited} has no docstring; its source: `{body[:320]}{cut}`")
"#;

/// What `lib`'s docs or source say, with where it was read; or why it could not be read.
pub async fn read(installed: &Installed, lib: &Library) -> String {
    match lib.docs {
        Docs::Quoted { text, from } => format!("{from}: “{text}”"),
        Docs::Python(target) => {
            let out = Spawn::new(format!("docs of {target}"), &installed.python)
                .args(["-c", READ_DOCS, target])
                .output(Duration::from_secs(30))
                .await;
            match out {
                Ok(out) if out.status.success() => {
                    String::from_utf8_lossy(&out.stdout).trim().to_owned()
                }
                Ok(out) => format!(
                    "could not read the docs of {target}: {}",
                    String::from_utf8_lossy(&out.stderr)
                        .lines()
                        .last()
                        .unwrap_or("")
                ),
                Err(e) => format!("could not read the docs of {target}: {e}"),
            }
        }
    }
}
