//! The rule of `cache.prefix-extraction` (T7) on the reuse counter: the search over
//! tenant a's secret digits that tenant b's guesses make, each guess judged by the
//! prompt tokens the vendor said it reused.
//!
//! The run drives a [`Search`] (which digit to guess next, what each guess reused);
//! `verify` drives a new one with the counters the transcript recorded for the lines
//! the case's `roles` name (`control`: a's own right and wrong guess at its first
//! digit; `guesses`: b's, in order), and must reach the same digits. The timed search
//! (answers without a counter, role `timed`) is not replayed.

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

    #[test]
    fn the_margin_is_half_the_owners_gain_and_none_without_one() {
        assert_eq!(margin(432, 272), Some(80));
        assert_eq!(margin(273, 272), Some(1));
        assert_eq!(margin(272, 272), None);
    }
}
