//! The rule of `cache.response-reuse` (T7, T1): whether an answer tenant b was given
//! is the answer tenant a was given before, by its id, its creation time and content,
//! or its speed, wherever the vendor's answers make that sign sound ([`Signs`]).
//!
//! The case's lines, named by its `roles` line: `first` (a's request), `again` (a's
//! repeat, the control), `fresh` (b's two fresh requests), `warm` (b's first fresh
//! request again, one token more to give), `same` (a's request as b sent it, byte for
//! byte first, then the variants a gateway may leave out of its key) and `paraphrase`
//! (a's request in other words). The run and `verify` judge them with [`judge`].

use crate::exchange::Exchange;

/// The roles the case records.
pub const ROLES: [&str; 6] = ["first", "again", "fresh", "warm", "same", "paraphrase"];

/// A stored answer stands out by its speed only when it comes at least this much
/// sooner than the model answers (and in a quarter of the time).
pub const MIN_GAIN_MS: f64 = 50.0;

/// What identifies one answer.
#[derive(Clone, Debug)]
pub struct Answer {
    /// Its line.
    pub seq: u64,
    /// The id the vendor gave it.
    pub id: Option<String>,
    /// Its creation time, in seconds.
    pub created: Option<u64>,
    /// Its content.
    pub content: String,
    /// How long it took, in milliseconds.
    pub total_ms: f64,
}

impl Answer {
    /// The answer recorded at `seq`, if it was answered.
    pub fn of(seq: u64, ex: &Exchange) -> Option<Answer> {
        if !ex.is_success() {
            return None;
        }
        // A body's top level, or the first frame that says.
        let fields = |v: &serde_json::Value| {
            (
                v["id"].as_str().filter(|s| !s.is_empty()).map(str::to_owned),
                v["created"].as_u64(),
            )
        };
        let (mut id, mut created) = ex
            .body
            .as_deref()
            .and_then(|b| serde_json::from_str::<serde_json::Value>(b).ok())
            .map(|v| fields(&v))
            .unwrap_or_default();
        for frame in &ex.frames {
            if id.is_some() && created.is_some() {
                break;
            }
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&frame.data) {
                let (i, c) = fields(&v);
                id = id.or(i);
                created = created.or(c);
            }
        }
        Some(Answer {
            seq,
            id,
            created,
            content: ex.content.clone(),
            total_ms: ex.timings.total_ms,
        })
    }
}

/// Which signs of reuse the vendor's answers can carry, from b's fresh answers.
pub struct Signs {
    /// Ids are per answer: b's fresh answers' ids differ from each other and from a's.
    pub ids: bool,
    /// `created` moves: b's fresh answers, made after the wait, are later than a's.
    pub times: bool,
    /// How soon the model answers b's own prompt a second time (its prefix cached,
    /// its answer not), where that is slow enough for a stored answer to stand out.
    pub fresh_ms: Option<f64>,
}

impl Signs {
    /// The signs `first`'s vendor gives, from b's `fresh` answers and its `warm`
    /// one (its first fresh prompt again, one token more to give).
    pub fn of(first: &Answer, fresh: &[Answer], warm: Option<&Answer>) -> Signs {
        let ids = first.id.is_some()
            && fresh.iter().all(|f| f.id.is_some() && f.id != first.id)
            && (fresh.len() < 2 || fresh[0].id != fresh[1].id);
        let times = first
            .created
            .is_some_and(|t| fresh.iter().any(|f| f.created.is_some_and(|c| c > t)));
        let fresh_ms = warm
            .map(|w| fresh.iter().map(|f| f.total_ms).fold(w.total_ms, f64::min))
            .filter(|ms| *ms >= 4.0 * MIN_GAIN_MS / 3.0);
        Signs { ids, times, fresh_ms }
    }

    /// Whether any sign could show a stored answer.
    pub fn any(&self) -> bool {
        self.ids || self.times || self.fresh_ms.is_some()
    }

    /// Why `x` is `first` given again, if it is. Its speed counts only where `x`'s
    /// prompt is new to its caller (`by_speed`): a prompt the caller sent before may be
    /// answered sooner by its own prefix cache, which is no harm.
    pub fn reused(&self, first: &Answer, x: &Answer, by_speed: bool) -> Option<String> {
        let same_content = !first.content.is_empty() && x.content == first.content;
        if self.ids && x.id.is_some() && x.id == first.id {
            return Some(format!("the id {}", x.id.as_deref().unwrap_or_default()));
        }
        if self.times && same_content && x.created.is_some() && x.created == first.created {
            return Some(format!(
                "its content and its creation time {}, made before the wait",
                x.created.unwrap_or_default()
            ));
        }
        let fresh = self.fresh_ms.filter(|_| by_speed)?;
        (same_content && 4.0 * x.total_ms < fresh && fresh - x.total_ms >= MIN_GAIN_MS).then(|| {
            format!(
                "its content, in {:.0} ms where the model took at least {fresh:.0} ms",
                x.total_ms
            )
        })
    }
}

/// One of b's requests like a's that was given a's answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Reused {
    /// Its place among the `tried` answers.
    pub index: usize,
    /// The paraphrase (a semantic cache).
    pub semantic: bool,
    /// The sign, in words.
    pub why: String,
}

/// Judges b's answers to requests like a's (`tried`: each answer, whether it is the
/// paraphrase, and whether its prompt is new to b): which were a's answer given again.
pub fn judge(signs: &Signs, first: &Answer, tried: &[(Answer, bool, bool)]) -> Vec<Reused> {
    tried
        .iter()
        .enumerate()
        .filter_map(|(index, (x, semantic, new_to_b))| {
            signs.reused(first, x, *new_to_b).map(|why| Reused {
                index,
                semantic: *semantic,
                why,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(seq: u64, id: &str, created: u64, content: &str, total_ms: f64) -> Answer {
        Answer {
            seq,
            id: (!id.is_empty()).then(|| id.to_owned()),
            created: (created > 0).then_some(created),
            content: content.into(),
            total_ms,
        }
    }

    #[test]
    fn a_reuse_shows_by_id_by_time_and_content_or_by_speed_and_only_where_the_sign_is_sound() {
        let first = answer(1, "c-1", 100, "RR-1 and a summary", 300.0);
        let fresh = [
            answer(5, "c-5", 103, "RR-2 and a summary", 310.0),
            answer(9, "c-9", 104, "RR-2 and a summary", 290.0),
        ];
        let warm = answer(6, "c-6", 103, "RR-2 and a summary", 280.0);
        let signs = Signs::of(&first, &fresh, Some(&warm));
        assert!(signs.ids && signs.times && signs.fresh_ms == Some(280.0));
        // Without the model's time with its prompt cached, speed is no sign.
        assert!(Signs::of(&first, &fresh, None).fresh_ms.is_none());
        // The same id.
        assert!(
            signs
                .reused(&first, &answer(6, "c-1", 103, "other", 300.0), false)
                .unwrap()
                .contains("id c-1")
        );
        // A new id, a's time and content: a stored answer renamed but not re-timed.
        assert!(
            signs
                .reused(&first, &answer(6, "c-6", 100, "RR-1 and a summary", 300.0), false)
                .is_some()
        );
        // A new id and time, a's content at once.
        let quick = answer(6, "c-6", 103, "RR-1 and a summary", 20.0);
        assert!(signs.reused(&first, &quick, true).unwrap().contains("20 ms"));
        // Not where the caller sent the prompt before (its own prefix cache).
        assert!(signs.reused(&first, &quick, false).is_none());
        // A's content as a fresh answer gives it (a deterministic model): no reuse.
        assert!(
            signs
                .reused(&first, &answer(6, "c-6", 103, "RR-1 and a summary", 270.0), true)
                .is_none()
        );
        // Faster, but not a's content: no reuse.
        assert!(
            signs
                .reused(&first, &answer(6, "c-6", 103, "something else", 20.0), true)
                .is_none()
        );

        // A vendor whose every answer says `chatcmpl-1`, with no time, and a model
        // that answers in 20 ms: no sign is sound, and none is used.
        let first = answer(1, "chatcmpl-1", 0, "x", 20.0);
        let fresh = [
            answer(5, "chatcmpl-1", 0, "y", 20.0),
            answer(9, "chatcmpl-1", 0, "y", 21.0),
        ];
        let signs = Signs::of(&first, &fresh, Some(&fresh[1]));
        assert!(!signs.any());
        assert!(
            signs
                .reused(&first, &answer(6, "chatcmpl-1", 0, "x", 1.0), true)
                .is_none()
        );
    }
}
