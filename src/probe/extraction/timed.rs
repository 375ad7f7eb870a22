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
//! that no baseline is cached by another's), sent just before or after it in an order
//! drawn from the run secret. Every time is until the vendor began to answer
//! (`Timings::first_answer_ms`), never the whole answer.
//! A pair says "faster" when the guess began to be answered sooner than its baseline
//! by more than the threshold, half the median difference tenant a's own right guess
//! made in its control. A sequential test per guess (anytime-valid, as the timing
//! case's) stops as soon as the pairs decide: faster in more than half the pairs (the
//! digit is a's), or in fewer than half (a speed-up of the threshold is ruled out: the
//! guess was not reused).

use super::{ExtractionParams, Guesses, inconclusive};
use crate::adapter::ChatRequest;
use crate::judge::sequential::{Decision, SequentialTest};
use crate::canary::RunSecret;
use crate::outcome::Outcome;
use crate::probe::{Context, Sizer, describe};
use crate::prompt::Filler;
use crate::session::{Sent, SessionError};

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

/// The chance that a fair coin lands heads at least `k` times in `n` tosses: how
/// often pairs whose arms are exchangeable (no reuse) show the guess sooner `k` times.
fn sign_tail(n: usize, k: usize) -> f64 {
    let mut choose = 1.0f64;
    let mut tail = 0.0;
    for i in 0..=n {
        if i >= k {
            tail += choose;
        }
        choose = choose * (n - i) as f64 / (i + 1) as f64;
    }
    tail / 2f64.powi(n as i32)
}

/// The one-sided 95% upper bound on the median of `gains` (the sign test's order
/// statistic): the median saving above it is ruled out.
fn median_upper_bound(gains: &[f64]) -> f64 {
    let mut sorted = gains.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    // The smallest order statistic j (1-based) with P(more than j − 1 below the median) ≤ 5%.
    let j = (1..=n).find(|&j| sign_tail(n, j) <= 0.05).unwrap_or(n);
    sorted[j - 1]
}

/// Runs the timed search, after tenant a's prompt and control in the counter layout
/// showed no counter that could be read; `why` says what they showed.
pub(super) async fn extract(
    p: &ExtractionParams,
    ctx: Context<'_>,
    mut sizer: Sizer<'_>,
    why: String,
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
    let mut unjudged = vec![why];
    let answered = |sent: &Sent, who: &str, unjudged: &mut Vec<String>| -> Option<f64> {
        if sent.exchange.is_success() {
            Some(sent.exchange.timings.first_answer_ms())
        } else {
            unjudged.push(format!(
                "{who} (transcript #{}) was not answered: {}",
                sent.seq,
                describe(&sent.exchange)
            ));
            None
        }
    };

    // One pair: the guess and its baseline, in an order the vendor cannot predict;
    // before every fourth, tenant a's whole prompt again (it comes back with every
    // request, as a system prompt does, and a cache keeps it only while nothing takes
    // its place).
    let mut drawn = 0u32;
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
            drawn += 1;
            let (g, b) = if baseline_first(ctx.session.secret(), ctx.case_id, drawn) {
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
    // Twelve pairs where the saving is steady; where it is not, as many as a guess of
    // the thief's may take (a chain's pieces): what the owner cannot see of its own
    // prompt with those samples, no other tenant's guess can.
    let right = char::from(b'0' + secret.digits[0]);
    let mut gains = Vec::new();
    let mut control_seqs = Vec::new();
    for cut in 0..secret.pieces[0].len() {
        if cut >= CONTROL_PAIRS && threshold(&gains).is_some() {
            break;
        }
        let (pair, seq) = pair!(victim, &[], right, 'x', cut, format!("tenant {victim}'s control"));
        gains.push(pair.gain());
        control_seqs.push(seq);
    }
    let (first_seq, last_seq) = (
        control_seqs.first().copied().unwrap_or(0),
        control_seqs.last().copied().unwrap_or(0),
    );
    let Some(theta) = threshold(&gains) else {
        let sooner = gains.iter().filter(|g| **g > 0.0).count();
        let chance = sign_tail(gains.len(), sooner);
        if chance > p.timing_alpha {
            // No reuse the owner can see: the arms are exchangeable as far as these
            // samples tell. A pass, with what it rules out.
            ctx.session.roles(ctx.case_id, &[("timed", control_seqs.clone())])?;
            return Ok(super::conclude(
                Vec::new(),
                Ok(format!(
                    "{}; tenant {victim}'s own right guess at its first digit was sooner than a wrong one in {sooner} of \
                     {} pairs (transcript #{first_seq} to #{last_seq}), as often as chance makes it (p = {chance:.2}): \
                     with as many samples as a guess of another tenant's takes, the time does not show even the \
                     owner a cached piece of {} tokens, so no guess can read tenant {victim}'s prompt by it; a \
                     median saving above {:.2} ms is ruled out (95%), and a channel needing more samples than {} a \
                     guess is not",
                    unjudged.join("; "),
                    gains.len(),
                    p.timing_step_tokens,
                    median_upper_bound(&gains).max(0.0),
                    gains.len()
                )),
                sizer.coverage,
            ));
        }
        let mut shown: Vec<String> = gains.iter().map(|g| format!("{g:.2}")).collect();
        shown.dedup();
        unjudged.push(format!(
            "tenant {victim}'s own right guess at its first digit was sooner than a wrong one in {sooner} of {} \
             pairs, more than chance makes it (p = {chance:.1e}), but not steadily by a margin a guess could be \
             judged by (gains {} ms, transcript #{first_seq} to #{last_seq}): the time shows a cached piece of {} \
             tokens only faintly here (noise near its prefill time; raise timing_step_tokens)",
            gains.len(),
            shown.join(", "),
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
        first_seq,
        last_seq
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
            // Both sides of one coin: faster past the threshold in more than half the
            // pairs (the control's right guess is, in five of six), or in fewer.
            let mut test = SequentialTest::new(p.timing_alpha, 0.5);
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
    // The timed search's pairs are not replayed by `verify` (see `judge::extraction`).
    ctx.session.roles(ctx.case_id, &[("timed", found.seqs.clone())])?;
    Ok(found.conclude(victim, thief, &secret.digits, &channel, whole.seq, rest, sizer))
}

/// Whether pair `n` of the case sends its baseline first: drawn from the run secret,
/// so that the arms are exchangeable wherever the guess is not reused.
fn baseline_first(secret: &RunSecret, case_id: &str, n: u32) -> bool {
    secret.seed("extraction.order", case_id, n) & 1 == 1
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
