//! [`Partition`]: the share of a suite's cases one process runs (`run --partition
//! INDEX/COUNT`), so that one profile's suite can run as shares side by side (a CI
//! matrix, a Kubernetes Indexed Job) and be merged into one signed summary
//! ([`crate::shard`]).

use serde::{Deserialize, Serialize};

/// The share of a suite's cases one run ran: of the cases in id order, those at
/// positions `index - 1`, `index - 1 + count`, `index - 1 + 2 * count`, ... (the way
/// test runners count shards, so every share is within one case of the others).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Partition {
    /// Which share, from 1.
    pub index: u32,
    /// How many shares.
    pub count: u32,
}

impl Partition {
    /// Whether the case at `position` (0-based, in id order) is this share's.
    pub fn owns(&self, position: usize) -> bool {
        position % self.count as usize == (self.index - 1) as usize
    }

    /// Whether a run in `share` (none: the whole suite) runs the case at `position`.
    pub fn in_share(share: Option<Partition>, position: usize) -> bool {
        share.is_none_or(|p| p.owns(position))
    }
}

impl std::fmt::Display for Partition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl std::str::FromStr for Partition {
    type Err = String;

    /// `INDEX/COUNT`, as `2/4`: the second of four shares.
    fn from_str(text: &str) -> Result<Self, String> {
        let usage = || format!("{text:?}: write the share as INDEX/COUNT, as 2/4 for the second of four");
        let (index, count) = text.split_once('/').ok_or_else(usage)?;
        let index: u32 = index.trim().parse().map_err(|_| usage())?;
        let count: u32 = count.trim().parse().map_err(|_| usage())?;
        if count == 0 || index == 0 || index > count {
            return Err(format!(
                "{text:?}: the share's index runs from 1 to the count (here 1 to {count}), and the count is at least 1"
            ));
        }
        Ok(Partition { index, count })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_is_read_as_index_over_count_and_owns_every_count_th_case() {
        let p: Partition = "2/3".parse().unwrap();
        assert_eq!(p, Partition { index: 2, count: 3 });
        let owned: Vec<usize> = (0..8).filter(|&i| p.owns(i)).collect();
        assert_eq!(owned, [1, 4, 7]);
        // Every position has exactly one owner.
        for i in 0..20 {
            let owners = (1..=3).filter(|&k| Partition { index: k, count: 3 }.owns(i)).count();
            assert_eq!(owners, 1, "position {i}");
        }
        for bad in ["0/3", "4/3", "1/0", "3", "a/b", "1/3/4", ""] {
            let e = bad.parse::<Partition>().unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{bad}: {e}");
        }
        assert_eq!(p.to_string(), "2/3");
    }
}
