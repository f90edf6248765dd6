//! Tokens judged by their order, not by one design's numbering. A scenario writes its expected
//! tokens in the seed's numbering — `token=1` is the first grant of the case, `token=2` a later
//! one — and a store answers with its own: seed 004's row counts 1, 2, 3; db-scheduler's
//! `version` goes 2, 4; an etcd lock's token is a revision. Fencing needs only that a later grant
//! carries a greater token (gaps allowed) and that one holding keeps its token, so a check passes
//! when the store's tokens stand in the same order as the seed's numbers, consistently through the
//! case: the first `token=n` a check meets binds the number `n` to the store's token, and every
//! later mention of `n` must be that token, every greater number a greater token, every smaller
//! one a smaller token.
//!
//! `token≥n` in an expected text states an order instead of a grant: any token not below grant
//! `n`'s (what a release that bumps the token leaves). Numbers at or below 0 are taken as they
//! are (an empty floor is 0). This module only judges; the recorder decides what a check is.

use std::collections::BTreeMap;

/// The seed's numbers bound so far in a case, each to the store's token.
#[derive(Debug, Default, Clone)]
pub struct TokenOrder {
    bound: BTreeMap<i64, i64>,
}

/// One token in an expected text: the seed's number and how it is compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expected {
    /// `token=n`: grant `n`'s token.
    Grant(i64),
    /// `token≥n`: any token not below grant `n`'s.
    AtLeast(i64),
}

/// A check judged: whether it passed, and its expected text as the evidence shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judged {
    pub passed: bool,
    pub shown_expected: String,
}

impl TokenOrder {
    /// Forgets every binding (a new case: the store's tables start empty again).
    pub fn reset(&mut self) {
        self.bound.clear();
    }

    /// The store's token bound to the seed's number `n`, once a check has bound it; `n` itself
    /// for numbers at or below 0.
    pub fn token(&self, n: i64) -> Option<i64> {
        if n <= 0 {
            Some(n)
        } else {
            self.bound.get(&n).copied()
        }
    }

    /// Whether `expected` and `actual` have the same tokens, judged by order: `None` when
    /// `expected` names no token (the caller compares the texts); otherwise the verdict, the
    /// bindings it made kept only when it passed.
    pub fn judge(&mut self, expected: &str, actual: &str) -> Option<Judged> {
        let (expected_shape, wanted) = split(expected, true);
        if wanted.is_empty() {
            return None;
        }
        let (actual_shape, got) = split(actual, false);
        let mut trial = self.clone();
        let mut passed = expected_shape == actual_shape && wanted.len() == got.len();
        let mut shown = Vec::with_capacity(wanted.len());
        for (i, want) in wanted.iter().enumerate() {
            let token = got.get(i).and_then(|g| match g {
                Expected::Grant(t) => Some(*t),
                Expected::AtLeast(_) => None,
            });
            shown.push(trial.describe(*want, token));
            let fits = token.is_some_and(|t| trial.fits(*want, t));
            if fits {
                if let (Expected::Grant(n), Some(t)) = (want, token) {
                    if *n > 0 {
                        trial.bound.insert(*n, t);
                    }
                }
            }
            passed &= fits;
        }
        if passed {
            *self = trial;
        }
        Some(Judged {
            passed,
            shown_expected: rebuild(expected, &shown, true),
        })
    }

    /// `text` (a check's description, written in the seed's numbering) with each `token=n` whose
    /// number a check bound to another token read as that token: the evidence names the tokens
    /// that were granted.
    pub fn rename(&self, text: &str) -> String {
        let (_, found) = split(text, false);
        if found.is_empty() {
            return text.to_owned();
        }
        let shown: Vec<String> = found
            .iter()
            .map(|e| match e {
                Expected::Grant(n) | Expected::AtLeast(n) => {
                    format!("={}", self.token(*n).unwrap_or(*n))
                }
            })
            .collect();
        rebuild(text, &shown, false)
    }

    /// [`TokenOrder::judge`] for a bare number (a floor, a token column): `expected` in the seed's
    /// numbering, `actual` the store's token (`None`: nothing there).
    pub fn judge_number(&mut self, expected: i64, actual: Option<i64>) -> Judged {
        let e = format!("token={expected}");
        let a = actual.map_or_else(|| "token=none".to_owned(), |t| format!("token={t}"));
        let judged = self
            .judge(&e, &a)
            .expect("a text with a token always names one");
        Judged {
            shown_expected: judged.shown_expected["token=".len()..].to_owned(),
            ..judged
        }
    }

    /// Whether the store's `token` may stand for `want`, given the bindings so far.
    fn fits(&self, want: Expected, token: i64) -> bool {
        match want {
            Expected::AtLeast(n) => self.token(n).is_some_and(|t| token >= t),
            Expected::Grant(n) if n <= 0 => token == n,
            Expected::Grant(n) => match self.bound.get(&n) {
                Some(t) => token == *t,
                None => {
                    let below = self.bound.range(..n).next_back().map(|(_, t)| *t);
                    let above = self.bound.range(n + 1..).next().map(|(_, t)| *t);
                    token > 0 && below.is_none_or(|b| token > b) && above.is_none_or(|a| token < a)
                }
            },
        }
    }

    /// How `want` reads in the evidence: the seed's number where the store answered it (seed
    /// 004's own numbering), else the token it is bound to, else the order it must keep.
    fn describe(&self, want: Expected, token: Option<i64>) -> String {
        match want {
            Expected::AtLeast(n) => match self.token(n) {
                Some(t) => format!("≥{t}"),
                None => format!("≥{n}"),
            },
            Expected::Grant(n) if n <= 0 || token == Some(n) && self.fits(want, n) => {
                format!("={n}")
            }
            Expected::Grant(n) => match self.bound.get(&n) {
                Some(t) => format!("={t}"),
                None => {
                    let below = self.bound.range(..n).next_back().map(|(_, t)| *t);
                    let above = self.bound.range(n + 1..).next().map(|(_, t)| *t);
                    match (below, above) {
                        (None, None) => "=(any token)".to_owned(),
                        (Some(b), None) => format!("=(a token >{b})"),
                        (None, Some(a)) => format!("=(a token <{a})"),
                        (Some(b), Some(a)) => format!("=(a token >{b} and <{a})"),
                    }
                }
            },
        }
    }
}

/// One mention of a token in a text: `token=` (or, where it is read, `token≥`) and the number
/// after it, if any.
struct Mention {
    /// Where `token` begins.
    start: usize,
    /// Where the mention ends (after the number; `number` when there is none).
    end: usize,
    at_least: bool,
    /// The number, when digits follow the tag.
    n: Option<i64>,
}

/// Every mention of a token in `text`, in order; `token≥` only when `read_at_least`.
fn mentions(text: &str, read_at_least: bool) -> Vec<Mention> {
    let mut found = Vec::new();
    let mut from = 0;
    loop {
        let rest = &text[from..];
        let eq = rest.find("token=");
        let ge = rest.find("token≥").filter(|_| read_at_least);
        let (i, at_least, tag) = match (eq, ge) {
            (Some(e), Some(g)) if g < e => (g, true, "token≥"),
            (Some(e), _) => (e, false, "token="),
            (None, Some(g)) => (g, true, "token≥"),
            (None, None) => return found,
        };
        let (start, number) = (from + i, from + i + tag.len());
        let tail = &text[number..];
        let sign = usize::from(tail.starts_with('-'));
        let digits = tail[sign..]
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(tail.len() - sign);
        let n = tail[..sign + digits]
            .parse::<i64>()
            .ok()
            .filter(|_| digits > 0);
        let end = if n.is_some() {
            number + sign + digits
        } else {
            number
        };
        found.push(Mention {
            start,
            end,
            at_least,
            n,
        });
        from = end;
    }
}

/// `text` with every token's number taken out (its shape), and the numbers in order. `expected`
/// reads `token≥n` too (its shape is `token=`'s, so that the two shapes compare).
fn split(text: &str, expected: bool) -> (String, Vec<Expected>) {
    let mut shape = String::with_capacity(text.len());
    let mut found = Vec::new();
    let mut from = 0;
    for m in mentions(text, expected) {
        shape.push_str(&text[from..m.start]);
        shape.push_str("token=");
        if let Some(n) = m.n {
            shape.push('#');
            found.push(if m.at_least {
                Expected::AtLeast(n)
            } else {
                Expected::Grant(n)
            });
        }
        from = m.end;
    }
    shape.push_str(&text[from..]);
    (shape, found)
}

/// `text` with each numbered mention's `=n` / `≥n` replaced by `shown`, in order (`token≥` read
/// only when `read_at_least`, as [`split`] read it).
fn rebuild(text: &str, shown: &[String], read_at_least: bool) -> String {
    let mut out = String::with_capacity(text.len());
    let mut shown = shown.iter();
    let mut from = 0;
    for m in mentions(text, read_at_least)
        .into_iter()
        .filter(|m| m.n.is_some())
    {
        out.push_str(&text[from..m.start]);
        out.push_str("token");
        match shown.next() {
            Some(s) => out.push_str(s),
            None => out.push_str(&text[m.start + "token".len()..m.end]),
        }
        from = m.end;
    }
    out.push_str(&text[from..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn judge(order: &mut TokenOrder, expected: &str, actual: &str) -> (bool, String) {
        let j = order.judge(expected, actual).expect("names a token");
        (j.passed, j.shown_expected)
    }

    #[test]
    fn the_seeds_own_numbering_reads_as_written() {
        let mut o = TokenOrder::default();
        assert_eq!(
            judge(&mut o, "ACQUIRED token=1", "ACQUIRED token=1"),
            (true, "ACQUIRED token=1".into())
        );
        assert_eq!(
            judge(&mut o, "ACQUIRED token=2", "ACQUIRED token=2"),
            (true, "ACQUIRED token=2".into())
        );
        assert_eq!(o.judge_number(2, Some(2)).shown_expected, "2");
        assert!(o.judge("no token here", "no token here").is_none());
    }

    #[test]
    fn a_takeover_needs_a_greater_token_with_gaps_allowed() {
        let mut o = TokenOrder::default();
        assert_eq!(
            judge(&mut o, "ACQUIRED token=1", "ACQUIRED token=2"),
            (true, "ACQUIRED token=(any token)".into())
        );
        assert_eq!(
            judge(&mut o, "RENEW ok=true token=1", "RENEW ok=true token=2"),
            (true, "RENEW ok=true token=2".into())
        );
        assert_eq!(
            judge(&mut o, "ACQUIRED token=2", "ACQUIRED token=4"),
            (true, "ACQUIRED token=(a token >2)".into())
        );
        assert_eq!(o.token(2), Some(4));
        assert!(o.judge_number(2, Some(4)).passed);
        assert!(!o.judge_number(2, Some(3)).passed);
        assert!(o.judge_number(0, Some(0)).passed);
        assert_eq!(
            o.rename("B acquires, token=2, after token=1 and token=3"),
            "B acquires, token=4, after token=2 and token=3"
        );
    }

    #[test]
    fn a_token_that_does_not_advance_or_changes_on_renewal_fails() {
        let mut o = TokenOrder::default();
        assert!(judge(&mut o, "ACQUIRED token=1", "ACQUIRED token=5").0);
        // the next grant with the same token: not greater
        assert_eq!(
            judge(&mut o, "ACQUIRED token=2", "ACQUIRED token=5"),
            (false, "ACQUIRED token=(a token >5)".into())
        );
        // nor smaller
        assert!(!judge(&mut o, "ACQUIRED token=2", "ACQUIRED token=3").0);
        // a failed check binds nothing
        assert_eq!(o.token(2), None);
        // a renewal that changes the token
        assert_eq!(
            judge(&mut o, "RENEW ok=true token=1", "RENEW ok=true token=6"),
            (false, "RENEW ok=true token=5".into())
        );
        // the shape around the tokens must match too
        assert!(!judge(&mut o, "ACQUIRED token=1", "REFUSED").0);
        assert!(!judge(&mut o, "ACQUIRED token=1", "ACQUIRED token=none").0);
    }

    #[test]
    fn numbers_bound_out_of_order_keep_their_order() {
        let mut o = TokenOrder::default();
        assert!(judge(&mut o, "token=3", "token=30").0);
        assert!(!judge(&mut o, "token=2", "token=31").0);
        assert_eq!(
            judge(&mut o, "token=2", "token=20"),
            (true, "token=(a token <30)".into())
        );
        assert!(judge(&mut o, "a token=1 b token=2", "a token=7 b token=20").0);
        assert!(!judge(&mut o, "token=4", "token=30").0);
    }

    #[test]
    fn at_least_states_an_order_after_a_release() {
        let mut o = TokenOrder::default();
        assert!(judge(&mut o, "ACQUIRED token=1", "ACQUIRED token=2").0);
        assert_eq!(
            judge(&mut o, "RELEASE ok=true token≥1", "RELEASE ok=true token=3"),
            (true, "RELEASE ok=true token≥2".into())
        );
        assert!(!judge(&mut o, "RELEASE ok=true token≥1", "RELEASE ok=true token=1").0);
        let mut seed = TokenOrder::default();
        assert!(judge(&mut seed, "ACQUIRED token=1", "ACQUIRED token=1").0);
        assert_eq!(
            judge(&mut seed, "RELEASE token≥1", "RELEASE token=1"),
            (true, "RELEASE token≥1".into())
        );
    }
}
