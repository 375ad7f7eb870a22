//! The rule of `cache.prefix-extraction` (T7) on the reuse counter: the search over
//! tenant a's secret digits that tenant b's guesses make, each guess judged by the
//! prompt tokens the vendor said it reused.
//!
//! The run drives a [`Search`] (which digit to guess next, what each guess reused);
//! `verify` drives a new one with the counters the transcript recorded for the lines
//! the case's `roles` name (`control`: a's own right and wrong guess at its first
//! digit; `guesses`: b's, in order), and must reach the same digits.
//!
//! Where the answers carry no counter, the search reads the time each answer began
//! ([`Timed`]): pairs of a guess and a baseline, tenant a's own control first (role
//! `timed-control`: its right first digit against a letter, pair by pair, guess line
//! then baseline line), setting the threshold a pair's gain must pass
//! ([`threshold`]); then tenant b's guesses (role `timed`, likewise in pairs), each a
//! sequential test. `verify` replays both with the recorded times and must reach the
//! same digits.

use crate::canary::RunSecret;

/// What one guess reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Guess {
    /// The digit guessed.
    pub digit: u8,
    /// The prompt tokens the vendor said it reused.
    pub cached: u64,
}

/// The digit a position's guesses point to: the one guess that reused at least
/// `margin` tokens more than the least any guess reused; `None` while no guess, or more
/// than one, stands out so. The margin comes from tenant a's own control (half what a
/// right guess added there), so that the odd token an engine counts differently from
/// one request to the next is not taken for a digit.
pub fn decided(guesses: &[Guess], margin: u64) -> Option<u8> {
    let low = guesses.iter().map(|g| g.cached).min()?;
    let mut above = guesses.iter().filter(|g| g.cached >= low + margin.max(1));
    let first = above.next()?;
    above.next().is_none().then_some(first.digit)
}

/// The margin a guess must reuse above the others: half what a's own right guess
/// reused above its wrong one, or `None` where it reused no more (the counter tells
/// nothing, and the case times the guesses instead).
pub fn margin(right: u64, wrong: u64) -> Option<u64> {
    (right > wrong).then(|| (right - wrong).div_ceil(2))
}

/// Tenant a's secret digits (`n` of them), drawn from the run secret.
pub fn digits(secret: &RunSecret, case: &str, n: u32) -> Vec<u8> {
    let seed = secret.seed("extraction", case, 0);
    (0..n).map(|i| ((seed >> (i * 4)) % 10) as u8).collect()
}

/// The order tenant b tries the digits at `position`, drawn from the run secret.
pub fn order(secret: &RunSecret, case: &str, position: usize) -> Vec<u8> {
    let mut digits: Vec<u8> = (0..10).collect();
    let mut state = secret.seed("extraction.order", case, position as u32);
    for i in (1..digits.len()).rev() {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let j = ((state >> 33) % (i as u64 + 1)) as usize;
        digits.swap(i, j);
    }
    digits
}

/// Tenant b's search: a position is decided as soon as one guess reused more than the
/// others by the margin; ten guesses that leave it undecided end the search, and so
/// does the guess budget.
#[derive(Clone, Debug)]
pub struct Search {
    digits: usize,
    max_guesses: u32,
    margin: u64,
    /// The digits recovered, in order.
    pub recovered: Vec<u8>,
    /// Guesses made.
    pub guesses: u32,
    /// Whether the budget ended the search.
    pub exhausted: bool,
    /// The guesses at the position the search ended on, undecided (none where every
    /// digit was recovered).
    pub last_position: Vec<Guess>,
    tried: Vec<Guess>,
    order: Vec<u8>,
    over: bool,
}

impl Search {
    /// A search for `digits` digits, at most `max_guesses` guesses.
    pub fn new(digits: usize, max_guesses: u32, margin: u64) -> Search {
        Search {
            digits,
            max_guesses,
            margin,
            recovered: Vec::new(),
            guesses: 0,
            exhausted: false,
            last_position: Vec::new(),
            tried: Vec::new(),
            order: Vec::new(),
            over: false,
        }
    }

    /// The next digit to guess, at position `self.recovered.len()` (`order` gives a
    /// position's order), or `None` when the search is over.
    pub fn next(&mut self, order: impl Fn(usize) -> Vec<u8>) -> Option<u8> {
        if self.over || self.recovered.len() >= self.digits {
            self.over = true;
            return None;
        }
        if self.tried.is_empty() {
            self.order = order(self.recovered.len());
        }
        if self.tried.len() >= self.order.len() || self.guesses >= self.max_guesses {
            self.exhausted = self.tried.len() < self.order.len();
            self.last_position = std::mem::take(&mut self.tried);
            self.over = true;
            return None;
        }
        Some(self.order[self.tried.len()])
    }

    /// What the guess [`Search::next`] gave reused.
    pub fn record(&mut self, cached: u64) {
        let digit = self.order[self.tried.len()];
        self.guesses += 1;
        self.tried.push(Guess { digit, cached });
        if let Some(d) = decided(&self.tried, self.margin) {
            self.recovered.push(d);
            self.tried.clear();
        }
    }
}

/// The threshold a pair's gain (the baseline's time less the guess's) must pass to
/// count as "faster", from the control's gains: half their median, when at least five
/// in six of them pass it (so that a right guess counts as faster at least as often as
/// the sequential test's effect size assumes, and its "no effect" cannot be a right
/// guess missed); `None` when the control shows no gain a guess could be judged by.
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
pub fn sign_tail(n: usize, k: usize) -> f64 {
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
pub fn median_upper_bound(gains: &[f64]) -> f64 {
    let mut sorted = gains.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    // The smallest order statistic j (1-based) with P(more than j − 1 below the median) ≤ 5%.
    let j = (1..=n).find(|&j| sign_tail(n, j) <= 0.05).unwrap_or(n);
    sorted[j - 1]
}

/// What tenant a's own control says of the time: a threshold guesses are judged by,
/// or, where none, whether its right guess was sooner no more often than chance makes
/// it (the time shows no reuse even to the owner: a pass) or more (inconclusive).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Control {
    /// A pair is faster past this many milliseconds.
    Threshold(f64),
    /// No steady gain; the right guess was sooner in `sooner` of the pairs, with this
    /// chance under exchangeable arms.
    Unseen {
        /// Pairs whose guess was sooner.
        sooner: usize,
        /// The sign test's tail.
        chance: f64,
    },
}

impl Control {
    /// The control's verdict on its pairs' gains.
    pub fn of(gains: &[f64]) -> Control {
        match threshold(gains) {
            Some(theta) => Control::Threshold(theta),
            None => {
                let sooner = gains.iter().filter(|g| **g > 0.0).count();
                Control::Unseen {
                    sooner,
                    chance: sign_tail(gains.len(), sooner),
                }
            }
        }
    }
}

/// Tenant b's timed search: at each position, the digits in the drawn order, each a
/// chain of at most `chain` pairs judged by a sequential test (faster past the
/// threshold in more than half the pairs: the digit is a's; in fewer: it was not
/// reused); a digit found moves to the next position, ten decided or undecided end the
/// search, and so does the guess budget or, in the run, the request budget
/// ([`Timed::exhaust`]).
#[derive(Clone, Debug)]
pub struct Timed {
    digits: usize,
    chain: usize,
    max_guesses: u32,
    alpha: f64,
    theta: f64,
    /// The digits recovered, in order.
    pub recovered: Vec<u8>,
    /// Guesses begun.
    pub guesses: u32,
    /// Pairs observed.
    pub pairs: u32,
    /// At the position the search is on: guesses that stayed undecided, and those
    /// decided as not reused.
    pub undecided: u32,
    /// See `undecided`.
    pub decided_none: u32,
    /// Whether a budget ended the search.
    pub exhausted: bool,
    order: Vec<u8>,
    /// The guess under test: its index in `order`, its test, its pairs so far, and
    /// what the test says.
    current: Option<(
        usize,
        super::sequential::SequentialTest,
        usize,
        super::sequential::Decision,
    )>,
    /// The index in `order` of the next guess.
    next_index: usize,
    over: bool,
}

impl Timed {
    /// A search for `digits` digits with chains of `chain` pairs, at most `max_guesses`
    /// guesses, each a sequential test at `alpha`, a pair faster past `theta` ms.
    pub fn new(digits: usize, chain: usize, max_guesses: u32, alpha: f64, theta: f64) -> Timed {
        Timed {
            digits,
            chain,
            max_guesses,
            alpha,
            theta,
            recovered: Vec::new(),
            guesses: 0,
            pairs: 0,
            undecided: 0,
            decided_none: 0,
            exhausted: false,
            order: Vec::new(),
            current: None,
            next_index: 0,
            over: false,
        }
    }

    /// The next pair to send: (position, digit, cut: the pair's place in the guess's
    /// chain), `order` giving a position's order; `None` when the search is over.
    pub fn next(&mut self, order: impl Fn(usize) -> Vec<u8>) -> Option<(usize, u8, usize)> {
        use super::sequential::{Decision, SequentialTest};
        loop {
            if self.over {
                return None;
            }
            match self.current.take() {
                Some((i, test, cut, Decision::Undecided)) if cut < self.chain => {
                    let digit = self.order[i];
                    self.current = Some((i, test, cut, Decision::Undecided));
                    return Some((self.recovered.len(), digit, cut));
                }
                Some((i, _, _, decision)) => match decision {
                    Decision::Effect => {
                        self.recovered.push(self.order[i]);
                        self.order.clear();
                    }
                    Decision::NoEffect => self.decided_none += 1,
                    Decision::Undecided => self.undecided += 1,
                },
                None => {
                    if self.recovered.len() >= self.digits {
                        self.over = true;
                        continue;
                    }
                    if self.order.is_empty() {
                        self.order = order(self.recovered.len());
                        (self.next_index, self.undecided, self.decided_none) = (0, 0, 0);
                    }
                    if self.next_index >= self.order.len() {
                        self.over = true;
                        continue;
                    }
                    if self.guesses >= self.max_guesses {
                        self.exhausted = true;
                        self.over = true;
                        continue;
                    }
                    self.guesses += 1;
                    self.current = Some((
                        self.next_index,
                        SequentialTest::new(self.alpha, 0.5),
                        0,
                        Decision::Undecided,
                    ));
                    self.next_index += 1;
                }
            }
        }
    }

    /// The gain of the pair [`Timed::next`] gave (its baseline's time less its guess's).
    pub fn observe(&mut self, gain: f64) {
        if let Some((_, test, cut, decision)) = &mut self.current {
            *decision = test.observe(gain > self.theta);
            *cut += 1;
            self.pairs += 1;
        }
    }

    /// A budget ended the search before the pair [`Timed::next`] gave was sent.
    pub fn exhaust(&mut self) {
        if self.current.take().is_some() {
            self.undecided += 1;
        }
        self.exhausted = true;
        self.over = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(digit: u8, cached: u64) -> Guess {
        Guess { digit, cached }
    }

    #[test]
    fn a_position_is_decided_by_the_one_guess_that_reused_more() {
        assert_eq!(decided(&[g(3, 272)], 80), None);
        assert_eq!(decided(&[g(3, 272), g(5, 272)], 80), None);
        assert_eq!(decided(&[g(3, 272), g(5, 432)], 80), Some(5));
        assert_eq!(decided(&[g(5, 432), g(3, 272)], 80), Some(5));
        // A token more or less, as llama.cpp counts now and then, is no digit.
        assert_eq!(decided(&[g(2, 224), g(1, 225)], 63), None);
        assert_eq!(decided(&[g(2, 224), g(1, 225), g(3, 350)], 63), Some(3));
        // A counter that moves for two digits tells nothing.
        assert_eq!(decided(&[g(5, 432), g(3, 272), g(4, 432)], 80), None);
    }

    /// Drives a search against a shared cache holding `secret`: a right guess reuses
    /// 160 tokens more.
    fn run(secret: &[u8], max_guesses: u32, shared: bool) -> Search {
        let order = |p: usize| -> Vec<u8> { (0..10).map(|d| (d + p as u8 * 3) % 10).collect() };
        let mut search = Search::new(secret.len(), max_guesses, 80);
        while let Some(d) = search.next(order) {
            let right = shared && secret.get(search.recovered.len()) == Some(&d);
            search.record(272 + 160 * u64::from(right));
        }
        search
    }

    #[test]
    fn a_search_over_a_shared_cache_recovers_the_secret_and_over_a_private_one_nothing() {
        let found = run(&[4, 0, 9, 7], 40, true);
        assert_eq!(found.recovered, vec![4, 0, 9, 7]);
        assert!(!found.exhausted && found.last_position.is_empty());
        let private = run(&[4, 0, 9, 7], 40, false);
        assert!(private.recovered.is_empty() && !private.exhausted);
        assert_eq!(private.guesses, 10);
        assert_eq!(private.last_position.len(), 10);
    }

    #[test]
    fn the_budget_ends_a_search_as_exhausted_but_not_one_whose_last_guess_ended_it() {
        let short = run(&[4, 0, 9, 7], 5, true);
        assert!(short.exhausted, "{short:?}");
        // Ten guesses, all undecided, with a budget of exactly ten: the position
        // ended, not the budget.
        let even = run(&[4], 10, false);
        assert!(!even.exhausted && even.guesses == 10);
    }

    /// Drives a timed search over a shared cache holding `secret` (a right guess is
    /// answered `saving` ms sooner than its baseline, a wrong one as soon, give or take
    /// the noise of `jitter`), with `pairs` pairs at most.
    fn timed(secret: &[u8], shared: bool, pairs: u32) -> Timed {
        let order = |p: usize| -> Vec<u8> { (0..10).map(|d| (d + p as u8 * 7) % 10).collect() };
        let mut search = Timed::new(secret.len(), 24, 40, 0.01, 5.0);
        let mut noise = 0x1234_5678u64;
        while let Some((position, digit, _)) = search.next(order) {
            if search.pairs >= pairs {
                search.exhaust();
                break;
            }
            noise = noise
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let jitter = (noise >> 40) as f64 / (1u64 << 24) as f64 * 4.0 - 2.0;
            let right = shared && secret[position] == digit;
            search.observe(if right { 10.0 } else { 0.0 } + jitter);
        }
        search
    }

    #[test]
    fn a_timed_search_reads_a_shared_cache_and_rules_a_private_one_out() {
        let found = timed(&[4, 0, 9], true, 10_000);
        assert_eq!(found.recovered, vec![4, 0, 9]);
        assert!(!found.exhausted, "{found:?}");
        let private = timed(&[4, 0, 9], false, 10_000);
        assert!(private.recovered.is_empty() && !private.exhausted, "{private:?}");
        assert_eq!((private.decided_none, private.undecided, private.guesses), (10, 0, 10));
        // The request budget ends it mid-guess: exhausted, that guess undecided.
        let short = timed(&[4, 0, 9], false, 7);
        assert!(short.exhausted && short.undecided == 1 && short.pairs == 7, "{short:?}");
    }

    #[test]
    fn the_control_sets_a_threshold_or_says_how_often_the_owner_was_sooner() {
        assert_eq!(Control::of(&[10.0; 12]), Control::Threshold(5.0));
        // Sooner half the time, by nothing steady: no threshold, as often as chance.
        let mixed = [1.0, -1.0, 2.0, -2.0, 0.5, -0.5];
        match Control::of(&mixed) {
            Control::Unseen { sooner, chance } => assert!(sooner == 3 && chance > 0.5),
            other => panic!("{other:?}"),
        }
        assert!((sign_tail(4, 4) - 1.0 / 16.0).abs() < 1e-12);
        assert_eq!(
            median_upper_bound(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]),
            9.0
        );
    }

    #[test]
    fn the_margin_is_half_the_owners_gain_and_none_without_one() {
        assert_eq!(margin(432, 272), Some(80));
        assert_eq!(margin(273, 272), Some(1));
        assert_eq!(margin(272, 272), None);
    }
}
