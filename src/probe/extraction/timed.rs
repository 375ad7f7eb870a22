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
//! guess was not reused). The threshold, the tests and the order of the search are
//! the evidence crate's (`judge::extraction::{Control, Timed}`), which `verify` drives
//! again with the recorded times.

use super::{ExtractionParams, Guesses, inconclusive};
use crate::adapter::ChatRequest;
use crate::canary::RunSecret;
use crate::judge::extraction::{Control, Timed, median_upper_bound};
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
            (Pair { guess_ms, baseline_ms }, [g.seq, b.seq])
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
    // Each pair's lines, the guess's then the baseline's: roles `timed-control` and
    // `timed`, which `verify` replays.
    let mut control_seqs = Vec::new();
    for cut in 0..secret.pieces[0].len() {
        if cut >= CONTROL_PAIRS && matches!(Control::of(&gains), Control::Threshold(_)) {
            break;
        }
        let (pair, seqs) = pair!(victim, &[], right, 'x', cut, format!("tenant {victim}'s control"));
        gains.push(pair.gain());
        control_seqs.extend(seqs);
    }
    let (first_seq, last_seq) = (
        control_seqs.first().copied().unwrap_or(0),
        control_seqs.last().copied().unwrap_or(0),
    );
    let theta = match Control::of(&gains) {
        Control::Threshold(theta) => theta,
        Control::Unseen { sooner, chance } => {
            return unseen(p, &ctx, sizer, unjudged, &gains, &control_seqs, sooner, chance);
        }
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

    // 2. The thief guesses, position by position, a chain per guess, the search's
    //    rule deciding which (`judge::extraction::Timed`, which `verify` replays).
    let mut search = Timed::new(
        secret.digits.len(),
        secret.pieces[0].len(),
        p.max_guesses,
        p.timing_alpha,
        theta,
    );
    let mut seqs = Vec::new();
    let mut primed_at = None;
    while let Some((position, digit, cut)) = search.next(|position| super::order(&ctx, position)) {
        if spent(&sizer) + 3 > budget {
            search.exhaust();
            break;
        }
        let known = search.recovered.clone();
        if primed_at != Some(position) {
            // The thief's own copy of the prompt up to the digit, so that its wrong
            // guesses are new by one piece only, on any cache scope.
            let primed = sizer.send_request(thief, &ask(thief, secret.prefix(&known)), false).await?;
            if answered(&primed, &format!("tenant {thief}'s priming request"), &mut unjudged).is_none() {
                return Ok(inconclusive(unjudged, sizer));
            }
            primed_at = Some(position);
        }
        let who = format!("tenant {thief}'s guess {digit} at digit {}", position + 1);
        let (pair, pair_seqs) = pair!(
            thief,
            &known,
            char::from(b'0' + digit),
            char::from(b'a' + digit),
            cut,
            who
        );
        seqs.extend(pair_seqs);
        search.observe(pair.gain());
    }
    let found = Guesses {
        recovered: search.recovered.clone(),
        guesses: search.guesses,
        pairs: search.pairs,
        seqs: seqs.iter().copied().step_by(2).collect(),
        exhausted: search.exhausted,
    };
    let (undecided, decided_none) = (search.undecided, search.decided_none);
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
    // `verify` replays the control and the guesses with the recorded times.
    ctx.session
        .roles(ctx.case_id, &[("timed-control", control_seqs), ("timed", seqs)])?;
    Ok(found.conclude(victim, thief, &secret.digits, &channel, whole.seq, rest, sizer))
}

/// The end of a timed search whose control showed no steady gain: a pass where the
/// owner's right guess was sooner no more often than chance makes it (the time shows
/// no reuse even to the owner), else inconclusive.
#[allow(clippy::too_many_arguments)]
fn unseen(
    p: &ExtractionParams,
    ctx: &Context<'_>,
    sizer: Sizer<'_>,
    mut unjudged: Vec<String>,
    gains: &[f64],
    control_seqs: &[u64],
    sooner: usize,
    chance: f64,
) -> Result<Outcome, SessionError> {
    let victim = ctx.session.tenant_labels()[0].to_owned();
    let (first_seq, last_seq) = (
        control_seqs.first().copied().unwrap_or(0),
        control_seqs.last().copied().unwrap_or(0),
    );
    if chance > p.timing_alpha {
        // No reuse the owner can see: the arms are exchangeable as far as these
        // samples tell. A pass, with what it rules out.
        ctx.session.roles(
            ctx.case_id,
            &[("timed-control", control_seqs.to_vec()), ("timed", Vec::new())],
        )?;
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
                median_upper_bound(gains).max(0.0),
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
    Ok(inconclusive(unjudged, sizer))
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
