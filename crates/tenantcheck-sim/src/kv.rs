//! [`KvPool`]: the reference vendor's paged KV cache.
//!
//! A fixed number of pages of a fixed number of token slots. A request takes whole
//! pages from the free list and gives them back when it is done. As in real engines,
//! freed pages are *not cleared*: the next request that takes them finds whatever the
//! last one wrote. A healthy request writes its own tokens before anything reads them,
//! so the residue is harmless; a request whose writes are skipped (a fault) reads it.
//!
//! The free list is a stack: the pages freed last are taken first, in the order the
//! freeing request held them. Slots hold token ids into the engine's vocabulary; id 0
//! is the empty token that fresh pages hold.

/// A page's index in the pool.
pub type PageId = u32;

/// The paged KV pool.
#[derive(Debug)]
pub struct KvPool {
    page_tokens: usize,
    slots: Vec<u32>,
    free: Vec<PageId>,
}

impl KvPool {
    /// A pool of `pages` pages of `page_tokens` slots each, all free and empty.
    pub fn new(page_tokens: usize, pages: usize) -> Self {
        assert!(page_tokens > 0, "pages hold at least one token");
        KvPool {
            page_tokens,
            slots: vec![0; page_tokens * pages],
            // Reversed so that page 0 is taken first.
            free: (0..pages as PageId).rev().collect(),
        }
    }

    /// Slots per page.
    pub fn page_tokens(&self) -> usize {
        self.page_tokens
    }

    /// Total slots in the pool.
    pub fn capacity_tokens(&self) -> usize {
        self.slots.len()
    }

    /// Pages on the free list.
    pub fn free_pages(&self) -> usize {
        self.free.len()
    }

    /// Pages needed to hold `tokens` tokens.
    pub fn pages_for(&self, tokens: usize) -> usize {
        tokens.div_ceil(self.page_tokens)
    }

    /// Takes enough pages for `tokens` tokens, or `None` when too few are free.
    pub fn allocate(&mut self, tokens: usize) -> Option<Vec<PageId>> {
        let n = self.pages_for(tokens);
        if n > self.free.len() {
            return None;
        }
        let at = self.free.len() - n;
        let mut pages = self.free.split_off(at);
        pages.reverse();
        Some(pages)
    }

    /// Writes `tokens` into the request's pages starting at logical position `offset`.
    pub fn write(&mut self, pages: &[PageId], offset: usize, tokens: &[u32]) {
        for (i, &t) in tokens.iter().enumerate() {
            let slot = self.slot(pages, offset + i);
            self.slots[slot] = t;
        }
    }

    /// Reads logical positions `0..len` of the request's pages.
    pub fn read(&self, pages: &[PageId], len: usize) -> Vec<u32> {
        (0..len).map(|pos| self.slots[self.slot(pages, pos)]).collect()
    }

    /// Gives pages back without clearing them.
    pub fn release(&mut self, mut pages: Vec<PageId>) {
        pages.reverse();
        self.free.extend(pages);
    }

    fn slot(&self, pages: &[PageId], pos: usize) -> usize {
        let page = pages[pos / self.page_tokens] as usize;
        page * self.page_tokens + pos % self.page_tokens
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freed_pages_keep_their_contents_and_are_reused_first() {
        let mut pool = KvPool::new(4, 8);
        let a = pool.allocate(8).unwrap();
        pool.write(&a, 0, &[1, 2, 3, 4, 5, 6, 7, 8]);
        pool.release(a.clone());
        let b = pool.allocate(8).unwrap();
        assert_eq!(b, a, "the pages freed last are taken first, in order");
        assert_eq!(pool.read(&b, 8), [1, 2, 3, 4, 5, 6, 7, 8], "residue is not cleared");
        pool.write(&b, 0, &[9; 8]);
        assert_eq!(pool.read(&b, 8), [9; 8]);
    }

    #[test]
    fn allocation_fails_when_the_pool_is_short() {
        let mut pool = KvPool::new(4, 2);
        assert!(pool.allocate(9).is_none());
        let p = pool.allocate(5).unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(pool.free_pages(), 0);
        pool.release(p);
        assert_eq!(pool.free_pages(), 2);
    }
}
