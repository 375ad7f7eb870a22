//! [`Version`]: an engine's version as a profile declares it and an advisory bounds
//! it, read by the rules of the schemes engines use, and [`Range`], the versions an
//! advisory affects.
//!
//! One reader covers the three schemes met in practice:
//!
//! - **PEP 440** (SGLang, vLLM and every Python engine): `[N!]N(.N)*[{a|b|rc}N][.postN][.devN][+local]`
//!   with the spellings PEP 440 normalises (`alpha`, `beta`, `c`, `pre`, `preview`,
//!   `rev`, `r`, `-N` for a post-release, `-`, `_` or `.` as separators, a leading `v`);
//! - **semver** (`1.2.3-rc.1+build`): its pre-release `rc.1`, `alpha`, `beta` read as
//!   PEP 440's, its build metadata as a local label;
//! - **llama.cpp build tags** (`b11434`): the build number.
//!
//! Versions are ordered as PEP 440 orders them: `1.0.dev0 < 1.0a1 < 1.0rc1 < 1.0 <
//! 1.0.post1`; a local label (`+cu124`) does not change the order.
//!
//! A version with a suffix no scheme explains (`0.5.21-cu124`, `0.5.22-foo`) is read
//! as *somewhere* between the earliest pre-release of its release (`.dev0`) and its
//! latest post-release: an advisory is judged on it only when every version in that
//! span gets the same answer, else the answer is [`Affected::Unknown`]. Nothing
//! unreadable is ever taken as "not affected".

use std::cmp::Ordering;

/// A version, as PEP 440 orders it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version {
    epoch: u64,
    /// The release numbers, trailing zeros removed (`1.0` and `1` are one version).
    release: Vec<u64>,
    /// A pre-release: `a` (0), `b` (1) or `rc` (2), and its number.
    pre: Option<(u8, u64)>,
    post: Option<u64>,
    dev: Option<u64>,
}

/// What a version string says: one version, or a span of them when a suffix is not
/// understood.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reading {
    /// Exactly this version.
    Exact(Version),
    /// Some version from `.0` to `.1` inclusive: the release's earliest pre-release
    /// and its latest post-release (an unexplained suffix).
    Span(Version, Version),
}

impl Version {
    /// Reads a version; `None` when it is not one in any scheme (see the module).
    pub fn read(text: &str) -> Option<Reading> {
        let lower = text.trim().to_ascii_lowercase();
        let t = lower.strip_prefix('v').unwrap_or(&lower);
        // llama.cpp: `b` and the build number.
        if let Some(n) = t
            .strip_prefix('b')
            .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        {
            return Some(Reading::Exact(Version::release(vec![n.parse().ok()?])));
        }
        // A local label (`+cu124`, semver build metadata) does not take part in order.
        let public = match t.split_once('+') {
            Some((public, local))
                if !local.is_empty() && local.chars().all(|c| c.is_ascii_alphanumeric() || ".-_".contains(c)) =>
            {
                public
            }
            Some(_) => return None,
            None => t,
        };
        let (version, rest) = parse_public(public)?;
        if rest.is_empty() {
            return Some(Reading::Exact(version));
        }
        // A label after `-` or `_`, starting with a letter (`.x` is a wildcard, not a
        // label).
        let label = rest.strip_prefix(['-', '_'])?;
        if !label.starts_with(|c: char| c.is_ascii_alphabetic())
            || !label.chars().all(|c| c.is_ascii_alphanumeric() || ".-_".contains(c))
        {
            return None;
        }
        // A build variant, as container tags name them (`-cu124`, `-rocm6.2`): a local
        // label in all but its separator.
        if is_build_variant(label) {
            return Some(Reading::Exact(version));
        }
        // Any other `-label`: somewhere around its release.
        if version.pre.is_some() || version.post.is_some() || version.dev.is_some() {
            return None;
        }
        let low = Version {
            dev: Some(0),
            ..version.clone()
        };
        let high = Version {
            post: Some(u64::MAX),
            ..version
        };
        Some(Reading::Span(low, high))
    }

    fn release(mut release: Vec<u64>) -> Version {
        while release.len() > 1 && release.last() == Some(&0) {
            release.pop();
        }
        Version {
            epoch: 0,
            release,
            pre: None,
            post: None,
            dev: None,
        }
    }

    /// PEP 440's sort key: a dev release of a final version comes before its
    /// pre-releases; no pre-release sorts after every one; no post before any.
    fn key(&self) -> SortKey<'_> {
        let pre = match (self.pre, self.post, self.dev) {
            (None, None, Some(_)) => (-1, 0, 0),
            (None, _, _) => (1, 0, 0),
            (Some((kind, n)), _, _) => (0, kind, n),
        };
        let post = self.post.map_or((-1, 0), |n| (0, n));
        let dev = self.dev.map_or((1, 0), |n| (0, n));
        (self.epoch, &self.release, pre, post, dev)
    }
}

/// Epoch, release, pre-release, post-release, dev release: each optional part as
/// (where its absence sorts, its value).
type SortKey<'a> = (u64, &'a [u64], (i8, u8, u64), (i8, u64), (i8, u64));

impl Ord for Version {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(&other.key())
    }
}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Whether `label` names a hardware build of a release rather than another version:
/// `cu124`, `rocm6.2`, `cpu`, `xpu`, `hpu`, `tpu`, `npu`, `neuron`.
fn is_build_variant(label: &str) -> bool {
    let numbered = |prefix: &str| {
        label
            .strip_prefix(prefix)
            .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit() || c == '.'))
    };
    numbered("cu") || numbered("rocm") || ["cpu", "xpu", "hpu", "tpu", "npu", "neuron"].contains(&label)
}

/// Reads the public part of a PEP 440 version; returns it and what could not be read.
fn parse_public(t: &str) -> Option<(Version, &str)> {
    let (epoch, t) = match t.split_once('!') {
        Some((e, rest)) => (e.parse().ok()?, rest),
        None => (0, t),
    };
    let mut rest = t;
    let mut release = Vec::new();
    loop {
        let (n, after) = number(rest)?;
        release.push(n);
        match after.strip_prefix('.') {
            Some(next) if next.starts_with(|c: char| c.is_ascii_digit()) => rest = next,
            _ => {
                rest = after;
                break;
            }
        }
    }
    let mut v = Version::release(release);
    v.epoch = epoch;
    // Pre-release.
    let (s, r) = separated(rest);
    if let Some((kind, after)) = word(
        r,
        &[
            ("alpha", 0),
            ("a", 0),
            ("beta", 1),
            ("b", 1),
            ("preview", 2),
            ("pre", 2),
            ("rc", 2),
            ("c", 2),
        ],
    ) {
        let (n, after) = optional_number(after);
        v.pre = Some((kind, n));
        rest = after;
    } else {
        let _ = s;
    }
    // Post-release: `.post1`, `-post1`, `post1`, `rev1`, `r1`, or `-1`.
    let (sep, r) = separated(rest);
    if let Some((_, after)) = word(r, &[("post", 0), ("rev", 0), ("r", 0)]) {
        let (n, after) = optional_number(after);
        v.post = Some(n);
        rest = after;
    } else if sep == Some('-') {
        if let Some((n, after)) = number(r) {
            v.post = Some(n);
            rest = after;
        }
    }
    // Dev release.
    let (_, r) = separated(rest);
    if let Some((_, after)) = word(r, &[("dev", 0)]) {
        let (n, after) = optional_number(after);
        v.dev = Some(n);
        rest = after;
    }
    Some((v, rest))
}

/// A leading separator (`.`, `-`, `_`), if any, and the text after it.
fn separated(t: &str) -> (Option<char>, &str) {
    match t.chars().next() {
        Some(c @ ('.' | '-' | '_')) => (Some(c), &t[1..]),
        _ => (None, t),
    }
}

/// One of `words` at the start of `t`, not followed by another letter.
fn word<'t>(t: &'t str, words: &[(&str, u8)]) -> Option<(u8, &'t str)> {
    words.iter().find_map(|(w, kind)| {
        let after = t.strip_prefix(w)?;
        (!after.starts_with(|c: char| c.is_ascii_alphabetic())).then_some((*kind, after))
    })
}

/// A number at the start of `t`.
fn number(t: &str) -> Option<(u64, &str)> {
    let end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    Some((t[..end].parse().ok()?, &t[end..]))
}

/// A number after an optional separator; 0 when there is none (`rc` is `rc0`).
fn optional_number(t: &str) -> (u64, &str) {
    let (_, r) = separated(t);
    number(r).unwrap_or((0, t))
}

/// Whether a version is affected by an advisory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Affected {
    /// Every version the text can mean is in the affected range.
    Yes,
    /// None is.
    No,
    /// The version cannot be read, or what it can mean is partly in the range.
    Unknown(String),
}

/// The versions an advisory affects: comparisons joined by commas, all of which must
/// hold (`< 0.5.22`, `>= 0.4, < 0.5.22`, `= 0.5.21`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Range {
    clauses: Vec<(Op, Version)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
}

impl Range {
    /// Reads a range; `Err` names the clause that is not a comparison with an exact
    /// version.
    pub fn read(text: &str) -> Result<Range, String> {
        let clauses = text
            .split(',')
            .map(|clause| {
                let clause = clause.trim();
                let (op, rest) = [
                    ("<=", Op::Le),
                    (">=", Op::Ge),
                    ("==", Op::Eq),
                    ("<", Op::Lt),
                    (">", Op::Gt),
                    ("=", Op::Eq),
                ]
                .iter()
                .find_map(|(s, op)| clause.strip_prefix(s).map(|r| (*op, r)))
                .unwrap_or((Op::Eq, clause));
                match Version::read(rest) {
                    Some(Reading::Exact(v)) => Ok((op, v)),
                    _ => Err(format!("{clause:?} is not a comparison with a version")),
                }
            })
            .collect::<Result<_, _>>()?;
        Ok(Range { clauses })
    }

    fn holds(&self, v: &Version) -> bool {
        self.clauses.iter().all(|(op, bound)| {
            let o = v.cmp(bound);
            match op {
                Op::Lt => o.is_lt(),
                Op::Le => o.is_le(),
                Op::Gt => o.is_gt(),
                Op::Ge => o.is_ge(),
                Op::Eq => o.is_eq(),
            }
        })
    }

    /// Whether the version `text` is affected. A range of comparisons is one interval,
    /// so a span of versions is inside it when both its ends are, and outside when the
    /// range ends before it or starts after it.
    pub fn affects(&self, text: &str) -> Affected {
        let (low, high) = match Version::read(text) {
            Some(Reading::Exact(v)) => {
                return if self.holds(&v) { Affected::Yes } else { Affected::No };
            }
            Some(Reading::Span(low, high)) => (low, high),
            None => {
                return Affected::Unknown(format!(
                    "{text:?} is not a version tenantcheck can read (PEP 440, semver, or a llama.cpp build tag bNNNN)"
                ));
            }
        };
        if self.holds(&low) && self.holds(&high) {
            return Affected::Yes;
        }
        let ends_before = self.clauses.iter().any(|(op, b)| match op {
            Op::Lt => *b <= low,
            Op::Le | Op::Eq => *b < low,
            _ => false,
        });
        let starts_after = self.clauses.iter().any(|(op, b)| match op {
            Op::Gt => *b >= high,
            Op::Ge | Op::Eq => *b > high,
            _ => false,
        });
        if ends_before || starts_after {
            Affected::No
        } else {
            Affected::Unknown(format!(
                "{text:?} has a suffix that is not a pre-, post- or dev-release, and the versions it may stand for are partly affected"
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exact(t: &str) -> Version {
        match Version::read(t) {
            Some(Reading::Exact(v)) => v,
            other => panic!("{t}: {other:?}"),
        }
    }

    #[test]
    fn pep_440_order() {
        let ordered = [
            "0.5.21.dev0",
            "0.5.21a1",
            "0.5.21b2",
            "0.5.21rc1",
            "0.5.21",
            "0.5.21.post1",
            "0.5.21.post2",
            "0.5.22.dev1",
            "0.5.22a0",
            "0.5.22rc1",
            "0.5.22",
            "0.6",
            "1!0.1",
        ];
        for w in ordered.windows(2) {
            assert!(exact(w[0]) < exact(w[1]), "{} < {}", w[0], w[1]);
        }
        assert_eq!(exact("v0.5.22"), exact("0.5.22.0"));
        assert_eq!(exact("0.5.22-rc.1"), exact("0.5.22rc1"));
        assert_eq!(exact("0.5.22-alpha"), exact("0.5.22a0"));
        assert_eq!(exact("0.5.21-1"), exact("0.5.21.post1"));
        assert_eq!(exact("0.5.21+cu124"), exact("0.5.21"));
        assert_eq!(exact("1.2.3-beta.2+build.5"), exact("1.2.3b2"));
        assert!(exact("b11434") < exact("b11500"));
    }

    #[test]
    fn the_advisory_of_the_incident_reads_real_versions() {
        let r = Range::read("< 0.5.22").unwrap();
        for affected in [
            "0.5.21.post1",
            "0.5.22rc1",
            "v0.5.21-cu124",
            "0.5.21",
            "0.4.0",
            "0.5.22.dev3",
        ] {
            assert_eq!(r.affects(affected), Affected::Yes, "{affected}");
        }
        for fixed in [
            "0.5.22",
            "0.5.22.post1",
            "0.5.23",
            "0.5.22+cu124",
            "v0.5.22-cu124",
            "0.5.22-rocm6.2",
        ] {
            assert_eq!(r.affects(fixed), Affected::No, "{fixed}");
        }
        for unknown in ["0.5.22-foo", "latest", "", "sglang-0.5.21", "0.5.x"] {
            assert!(matches!(r.affects(unknown), Affected::Unknown(_)), "{unknown}");
        }
        let between = Range::read(">= 0.4, < 0.5.22").unwrap();
        assert_eq!(between.affects("0.3.9"), Affected::No);
        assert_eq!(between.affects("0.4.0"), Affected::Yes);
        assert_eq!(between.affects("0.3.9-custom"), Affected::No);
        let point = Range::read("= 0.5.21rc1").unwrap();
        assert!(matches!(point.affects("0.5.21-custom"), Affected::Unknown(_)));
        assert_eq!(point.affects("0.5.20-custom"), Affected::No);
        assert!(Range::read("< soon").is_err());
    }
}
