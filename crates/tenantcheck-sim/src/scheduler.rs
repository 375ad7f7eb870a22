//! [`Scheduler`]: the reference vendor's decode batch: a fixed number of slots, each
//! with an output buffer between the engine and the HTTP front end.
//!
//! A request takes a free slot (waiting while the batch is full), the engine's answer
//! is put into the slot's buffer, and the front end takes it out: whole for a plain
//! answer, one token per decode step for a stream. When a client goes away mid-stream,
//! the front end drops its slot with tokens still in the buffer: a healthy scheduler
//! clears them before the slot is reused. With the fault `cancel-swap` it does not,
//! and the next request given that slot reads the unsent rest of the cancelled answer
//! before its own, the mechanism of the 2023 chat-service incident (a cancelled
//! request's reply left on a pooled connection, read by the next caller).
//!
//! Free slots are kept last-in, first-out, so the slot a cancelled stream gives back is
//! the next one handed out.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The decode batch.
#[derive(Debug, Clone)]
pub struct Scheduler {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    free: Mutex<Vec<usize>>,
    buffers: Vec<Mutex<VecDeque<String>>>,
    permits: Arc<Semaphore>,
    clear_on_cancel: bool,
    /// With `clear_on_cancel` false: whether a cancelled answer is kept this time.
    keeps: Arc<crate::intermittent::Intermittent>,
    step: Duration,
    cancelled: AtomicU64,
}

/// One request's place in the batch; given back when dropped.
#[derive(Debug)]
pub struct Slot {
    inner: Arc<Inner>,
    index: usize,
    started: bool,
    _permit: OwnedSemaphorePermit,
}

impl Scheduler {
    /// A batch of `slots` slots whose streams send one token per `step`. With
    /// `clear_on_cancel` false (the fault `cancel-swap`), a cancelled answer's unsent
    /// tokens stay in its slot.
    pub fn new(slots: usize, step: Duration, clear_on_cancel: bool) -> Self {
        let slots = slots.max(1);
        Scheduler {
            inner: Arc::new(Inner {
                free: Mutex::new((0..slots).rev().collect()),
                buffers: (0..slots).map(|_| Mutex::new(VecDeque::new())).collect(),
                permits: Arc::new(Semaphore::new(slots)),
                clear_on_cancel,
                keeps: Arc::new(crate::intermittent::Intermittent::always()),
                step,
                cancelled: AtomicU64::new(0),
            }),
        }
    }

    /// The scheduler, keeping a cancelled answer (without `clear_on_cancel`) only when
    /// `keeps` draws so (`--leak-rate`).
    pub fn keeping(mut self, keeps: Arc<crate::intermittent::Intermittent>) -> Self {
        Arc::get_mut(&mut self.inner)
            .expect("the scheduler is not shared yet")
            .keeps = keeps;
        self
    }

    /// Waits for a free slot and takes it.
    pub async fn acquire(&self) -> Slot {
        let permit = Arc::clone(&self.inner.permits)
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        let index = self
            .inner
            .free
            .lock()
            .expect("slot list poisoned")
            .pop()
            .expect("a permit guarantees a free slot");
        Slot {
            inner: Arc::clone(&self.inner),
            index,
            started: false,
            _permit: permit,
        }
    }

    /// How many answers were abandoned by their clients with tokens unsent.
    pub fn cancelled(&self) -> u64 {
        self.inner.cancelled.load(Ordering::Relaxed)
    }
}

impl Slot {
    fn buffer(&self) -> std::sync::MutexGuard<'_, VecDeque<String>> {
        self.inner.buffers[self.index].lock().expect("slot buffer poisoned")
    }

    /// Puts the engine's answer, token by token, into the slot's buffer.
    pub fn put<'t>(&self, tokens: impl IntoIterator<Item = &'t str>) {
        self.buffer().extend(tokens.into_iter().map(str::to_owned));
    }

    /// Everything in the buffer, at once (a plain answer).
    pub fn take_all(&mut self) -> String {
        self.buffer().drain(..).collect()
    }

    /// The next token of a stream, one decode step after the previous one; `None` when
    /// the buffer is empty.
    pub async fn next_token(&mut self) -> Option<String> {
        if self.started && !self.inner.step.is_zero() {
            tokio::time::sleep(self.inner.step).await;
        }
        self.started = true;
        self.buffer().pop_front()
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        {
            let mut buffer = self.buffer();
            if !buffer.is_empty() {
                self.inner.cancelled.fetch_add(1, Ordering::Relaxed);
                if self.inner.clear_on_cancel || !self.inner.keeps.acts() {
                    buffer.clear();
                }
            }
        }
        self.inner.free.lock().expect("slot list poisoned").push(self.index);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_cancelled_answer_is_cleared_unless_the_fault_keeps_it() {
        for (clear, expected) in [(true, "mine"), (false, " rest of yoursmine")] {
            let s = Scheduler::new(4, Duration::ZERO, clear);
            let mut first = s.acquire().await;
            first.put(["yours", " rest", " of", " yours"]);
            assert_eq!(first.next_token().await.as_deref(), Some("yours"));
            drop(first);
            assert_eq!(s.cancelled(), 1);
            let mut second = s.acquire().await;
            second.put(["mine"]);
            assert_eq!(second.take_all(), expected);
        }
    }

    #[tokio::test]
    async fn a_full_batch_waits_for_a_slot() {
        let s = Scheduler::new(1, Duration::ZERO, true);
        let held = s.acquire().await;
        let waiting = tokio::time::timeout(Duration::from_millis(50), s.acquire()).await;
        assert!(waiting.is_err(), "a second slot was handed out of a batch of one");
        drop(held);
        let _next = tokio::time::timeout(Duration::from_secs(5), s.acquire()).await.unwrap();
    }
}
