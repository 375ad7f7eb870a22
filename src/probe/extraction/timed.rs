//! Extraction by timing, for vendors whose answers carry no reuse counter.
//!
//! A prompt whose prefix is in the cache is prefilled faster; that is the whole
//! channel. One guess sent once says little (the network and the batch add noise), and
//! a guess sent twice is cached by its own first sending, so each guess is a *chain*:
//! sample `j` of guess `d` is the prompt up to the digit, `d`, and the first `j + 1`
//! pieces of the text after it (`timing_step_tokens` each). Every sample is new to the
//! cache by one piece, unless tenant a's prompt holds it: a right guess is reused to its
//! end, a wrong one prefills one piece more than what the thief itself sent before.
//!
//! Each sample is paired with the same cut of a *baseline* chain, the position's
//! prompt with a letter in the digit's place (certainly wrong, one letter per guess so
//! that no baseline is cached by another's), sent just before or after it in turns.
//! A pair says "faster" when the guess took less time than its baseline by more than
//! the threshold, half the median difference tenant a's own right guess made in its
//! control. A sequential test per guess (anytime-valid, as the timing case's) stops as
//! soon as the pairs decide: an effect (the digit is a's) or none.

use super::{ExtractionParams, Guesses, inconclusive};
use crate::adapter::ChatRequest;
use crate::judge::sequential::{Decision, SequentialTest};
use crate::outcome::Outcome;
use crate::probe::{Context, Sizer, describe};
use crate::prompt::Filler;
use crate::session::{Sent, SessionError};

/// The effect size the sequential test looks for: a right guess is faster than its
/// baseline in at least 4 pairs of 5. The control shows at least 5 in 6 (10 of 12).
const P1: f64 = 0.8;

/// Control pairs of tenant a's own right guess against a baseline.
const CONTROL_PAIRS: usize = 12;

/// Tenant a sends its prompt again before every this many pairs of a chain.
const RESEND_EVERY: usize = 4;

/// The victim's prompt cut into pieces, for chains of timed guesses.
struct Chained {
    digits: Vec<u8>,
    /// The document and the words that introduce the first digit.
    document: String,
    /// For each digit, the pieces of text after it.
    pieces: Vec<Vec<String>>,
    /// For each digit, the words after its pieces (those that introduce the next).
    tails: Vec<String>,
}

impl Chained {
    /// The prompt up to digit `known.len()`, the digits before it as `known`.
    fn prefix(&self, known: &[u8]) -> String {
        let mut text = self.document.clone();
        for (i, d) in known.iter().enumerate() {
            text.push(char::from(b'0' + d));
            text.push_str(&self.pieces[i].concat());
            text.push_str(&self.tails[i]);
        }
        text
    }

    /// Sample `cut` of the chain of `guess` at digit `known.len()`.
    fn sample(&self, known: &[u8], guess: char, cut: usize) -> String {
        let mut text = self.prefix(known);
        text.push(guess);
        text.push_str(&self.pieces[known.len()][..=cut].concat());
        text
    }

    /// The whole prompt tenant a sends.
    fn whole(&self) -> String {
        self.prefix(&self.digits)
    }
}

/// The time of a pair's guess and baseline, in milliseconds.
#[derive(Clone, Copy, Debug)]
struct Pair {
    guess_ms: f64,
    baseline_ms: f64,
}

impl Pair {
    fn gain(self) -> f64 {
        self.baseline_ms - self.guess_ms
    }
}

/// The threshold a pair's gain must pass to count as "faster", from the control's
/// gains: half their median, when at least five in six of them pass it (so that a right
/// guess counts as faster at least as often as the sequential test's effect size
/// assumes, and its "no effect" cannot be a right guess missed); `None` when the control
/// shows no gain a guess could be judged by.
pub fn threshold(control: &[f64]) -> Option<f64> {
    if control.is_empty() {
        return None;
    }
    let mut sorted = control.to_vec();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    if median <= 0.0 {
        return None;
    }
    let theta = median / 2.0;
    let passed = control.iter().filter(|g| **g > theta).count();
    (6 * passed >= 5 * control.len()).then_some(theta)
}

/// Runs the timed search, after tenant a's counter-less prompt (`first`, in its
/// counter layout) showed there is no counter to read.
pub(super) async fn extract(
    p: &ExtractionParams,
    ctx: Context<'_>,
    mut sizer: Sizer<'_>,
    first: &Sent,
) -> Result<Outcome, SessionError> {
    let labels: Vec<String> = ctx.session.tenant_labels().into_iter().map(str::to_owned).collect();
    let (victim, thief) = (&labels[0], &labels[1]);
    let secret = draw(p, &ctx, &sizer);
    let budget = u64::from(p.timing_requests);
    let start = sizer.coverage.requests;
    let spent = |sizer: &Sizer<'_>| sizer.coverage.requests - start;
    let ask = |tenant: &str, prompt: String| ChatRequest {
        cache_salt: super::salt(&ctx, tenant),
        ..ChatRequest::user(prompt, 1)
    };
    let mut unjudged = vec![format!(
        "tenant {victim}'s prompt (transcript #{}) reported no reuse counter: the case timed the guesses instead",
        first.seq
    )];
    let answered = |sent: &Sent, who: &str, unjudged: &mut Vec<String>| -> Option<f64> {
        if sent.exchange.is_success() {
            Some(sent.exchange.timings.total_ms)
        } else {
            unjudged.push(format!(
                "{who} (transcript #{}) was not answered: {}",
                sent.seq,
                describe(&sent.exchange)
            ));
            None
        }
    };

    // One pair: the guess and its baseline, in turns; before every fourth, tenant a's
    // whole prompt again (it comes back with every request, as a system prompt does,
    // and a cache keeps it only while nothing takes its place).
    macro_rules! pair {
        ($tenant:expr, $known:expr, $guess:expr, $baseline:expr, $cut:expr, $who:expr) => {{
            if $cut % RESEND_EVERY == 0 {
                let again = sizer.send_request(victim, &ask(victim, secret.whole()), false).await?;
                if answered(&again, &format!("tenant {victim}'s prompt, sent again"), &mut unjudged).is_none() {
                    return Ok(inconclusive(unjudged, sizer));
                }
            }
            let guess = ask($tenant, secret.sample($known, $guess, $cut));
            let baseline = ask($tenant, secret.sample($known, $baseline, $cut));
            let (g, b) = if $cut % 2 == 0 {
                let b = sizer.send_request($tenant, &baseline, false).await?;
                (sizer.send_request($tenant, &guess, false).await?, b)
            } else {
                let g = sizer.send_request($tenant, &guess, false).await?;
                (g, sizer.send_request($tenant, &baseline, false).await?)
            };
            let (Some(guess_ms), Some(baseline_ms)) = (
                answered(&g, &$who, &mut unjudged),
                answered(&b, &format!("{} (its baseline)", $who), &mut unjudged),
            ) else {
                return Ok(inconclusive(unjudged, sizer));
            };
            (Pair { guess_ms, baseline_ms }, g.seq)
        }};
    }

    // 1. Tenant a's whole prompt, then its own control: its right first digit against
    //    a baseline, pair by pair.
    let whole = sizer.send_request(victim, &ask(victim, secret.whole()), false).await?;
    if answered(&whole, &format!("tenant {victim}'s timed prompt"), &mut unjudged).is_none() {
        return Ok(inconclusive(unjudged, sizer));
    }
    let right = char::from(b'0' + secret.digits[0]);
    let mut gains = Vec::new();
    let mut control_seqs = Vec::new();
    for cut in 0..CONTROL_PAIRS.min(secret.pieces[0].len()) {
        let (pair, seq) = pair!(victim, &[], right, 'x', cut, format!("tenant {victim}'s control"));
        gains.push(pair.gain());
        control_seqs.push(seq);
    }
    let Some(theta) = threshold(&gains) else {
        let mut shown: Vec<String> = gains.iter().map(|g| format!("{g:.2}")).collect();
        shown.dedup();
        unjudged.push(format!(
            "tenant {victim}'s own right guess at its first digit was not steadily faster than a wrong one \
             (gains {} ms, transcript #{} to #{}): the time does not tell a cached piece of {} tokens here \
             (no prefix cache, or noise larger than its prefill time; raise timing_step_tokens)",
            shown.join(", "),
            control_seqs.first().unwrap_or(&0),
            control_seqs.last().unwrap_or(&0),
            p.timing_step_tokens
        ));
        return Ok(inconclusive(unjudged, sizer));
    };
    unjudged.clear();
    let control = format!(
        "tenant {victim}'s own right guess was faster than a wrong one by {:.2} ms at the median of {} pairs \
         (transcript #{} to #{}); a pair counts as faster past {theta:.2} ms",
        2.0 * theta,
        gains.len(),
        control_seqs.first().unwrap_or(&0),
        control_seqs.last().unwrap_or(&0)
    );

    // 2. The thief guesses, position by position, a chain per guess.
    let mut found = Guesses::default();
    let mut undecided = 0u32;
    let mut decided_none = 0u32;
    'positions: while found.recovered.len() < secret.digits.len() {
        let position = found.recovered.len();
        let known = found.recovered.clone();
        // The thief's own copy of the prompt up to the digit, so that its wrong
        // guesses are new by one piece only, on any cache scope.
        let primed = sizer.send_request(thief, &ask(thief, secret.prefix(&known)), false).await?;
        if answered(&primed, &format!("tenant {thief}'s priming request"), &mut unjudged).is_none() {
            return Ok(inconclusive(unjudged, sizer));
        }
        undecided = 0;
        decided_none = 0;
        for digit in super::order(&ctx, position) {
            if found.guesses >= p.max_guesses || spent(&sizer) + 3 > budget {
                found.exhausted = true;
                break 'positions;
            }
            found.guesses += 1;
            let guess = char::from(b'0' + digit);
            let baseline = char::from(b'a' + digit);
            let mut test = SequentialTest::new(p.timing_alpha, P1);
            let mut decision = Decision::Undecided;
            for cut in 0..secret.pieces[position].len() {
                if spent(&sizer) + 3 > budget {
                    found.exhausted = true;
                    break;
                }
                let who = format!("tenant {thief}'s guess {digit} at digit {}", position + 1);
                let (pair, seq) = pair!(thief, &known, guess, baseline, cut, who);
                found.seqs.push(seq);
                found.pairs += 1;
                decision = test.observe(pair.gain() > theta);
                if decision != Decision::Undecided {
                    break;
                }
            }
            match decision {
                Decision::Effect => {
                    found.recovered.push(digit);
                    continue 'positions;
                }
                Decision::NoEffect => decided_none += 1,
                Decision::Undecided => undecided += 1,
            }
        }
        break;
    }
    let channel = format!(
        "the time of its own answers, the vendor reporting no reuse counter ({} pairs of a guess and a \
         baseline, a sequential test per guess at alpha {})",
        found.pairs, p.timing_alpha
    );
    let rest = if found.exhausted {
        Err(format!(
            "the budget (max_guesses = {}, timing_requests = {}) ended before tenant {thief} had decided every \
             digit at a position",
            p.max_guesses, p.timing_requests
        ))
    } else if undecided > 0 {
        Err(format!(
            "{undecided} of the guesses at digit {} stayed undecided after {} pairs each (raise timing_samples)",
            found.recovered.len() + 1,
            secret.pieces[0].len()
        ))
    } else if decided_none == 10 {
        Ok(format!(
            "tenant {thief}'s guesses at digit {} of tenant {victim}'s {}-digit secret were none faster than their \
             baselines (each decided by the sequential test): none of tenant {victim}'s prompt was reused; {control}",
            found.recovered.len() + 1,
            secret.digits.len()
        ))
    } else {
        Ok(control)
    };
    Ok(found.conclude(victim, thief, &secret.digits, &channel, whole.seq, rest, sizer))
}

/// The victim's secret and the text around it, in pieces, drawn from the run secret
/// (the same digits as the counter layout's).
fn draw(p: &ExtractionParams, ctx: &Context<'_>, sizer: &Sizer<'_>) -> Chained {
    let secret = ctx.session.secret();
    let digits = super::digits(p, ctx);
    let builder = sizer.builder();
    let document = super::document(p, ctx, sizer, "extraction.timed");
    let pieces = (0..p.digits)
        .map(|i| {
            (0..p.timing_samples)
                .map(|j| {
                    builder.build(
                        u64::from(p.timing_step_tokens),
                        &Filler::plain(secret.seed("extraction.timed", ctx.case_id, 2 + i * 64 + j)),
                        if j == 0 { ". " } else { " " },
                        &[],
                        "",
                    )
                })
                .collect()
        })
        .collect();
    let tails = (0..p.digits).map(|i| super::next_words(p, i).to_owned()).collect();
    Chained {
        digits,
        document,
        pieces,
        tails,
    }
}

#[cfg(test)]
mod tests {
    use super::threshold;

    #[test]
    fn the_threshold_is_half_the_control_median_when_the_control_is_steady() {
        let steady = [4.0, 5.0, 6.0, 5.0, 4.5, 5.5, 6.0, 5.0, 4.0, 5.0, 6.0, 5.0];
        assert_eq!(threshold(&steady), Some(2.5));
        // Two pairs of twelve may miss it (hiccups), three may not.
        let mut hiccups = steady;
        hiccups[3] = -1.0;
        hiccups[7] = 0.1;
        assert_eq!(threshold(&hiccups), Some(2.5));
        hiccups[9] = 2.0;
        assert_eq!(threshold(&hiccups), None);
        // No gain, or noise around none, is no control.
        assert_eq!(threshold(&[0.0; 8]), None);
        assert_eq!(threshold(&[0.3, -0.2, 0.1, -0.4, 0.2, 0.0, -0.1, 0.4]), None);
        assert_eq!(threshold(&[]), None);
    }
}
