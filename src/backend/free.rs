//! The free-buffer policy both backends share: best fit by size, reuse before allocate, a byte budget, and
//! eviction of the least recently freed buffer when the budget is exceeded.

use std::collections::{BTreeMap, VecDeque};

/// The free budget of a device with `memory` bytes (`None`: unknown): a quarter of it, at least 256 MiB, or 1 GiB
/// where unknown; `LAZOR_POOL_MB` overrides it. A quarter leaves the rest to live tensors and to other programs,
/// and an allocation that fails empties the pool and is tried again, so a large budget costs no failures.
pub(crate) fn budget(memory: Option<u64>) -> u64 {
    crate::env::pool_budget().unwrap_or_else(|| memory.map_or(1 << 30, |m| (m / 4).max(256 << 20)))
}

/// The host's physical memory in bytes, where the system says (Linux's `/proc/meminfo`).
pub(crate) fn host_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib << 10)
}

/// Free buffers of one kind (storage or staging) waiting to be reused.
///
/// A buffer is kept until the free bytes exceed the budget; then the buffers freed longest ago go first, so a
/// program that moves from one size to another does not keep the old size's buffers forever, and the buffer just
/// released (the likeliest to be wanted next) stays. Each buffer may carry a stamp (the wgpu backend's: the last
/// dispatch that used it), so a caller can ask for one last used before a given point ([`FreeList::take_settled`]).
pub(crate) struct FreeList<B> {
    /// Buffers by size; within a size, oldest first, each with the tick it was freed at and its stamp.
    by_size: BTreeMap<u64, VecDeque<(u64, u64, B)>>,
    /// (tick, size) of every free buffer, oldest first: the eviction order.
    order: BTreeMap<u64, u64>,
    bytes: u64,
    budget: u64,
    tick: u64,
}

impl<B> FreeList<B> {
    /// An empty list that keeps at most `budget` bytes.
    pub fn new(budget: u64) -> FreeList<B> {
        FreeList { by_size: BTreeMap::new(), order: BTreeMap::new(), bytes: 0, budget, tick: 0 }
    }

    /// Bytes of the buffers it holds.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The most bytes it keeps.
    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// Changes the budget; returns the buffers evicted to stay within it, oldest first.
    pub fn set_budget(&mut self, budget: u64) -> Vec<B> {
        self.budget = budget;
        self.evict_over_budget()
    }

    /// Buffers it holds.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// The smallest free buffer of at least `size` bytes and at most `max` (the most recently freed of that size).
    pub fn take(&mut self, size: u64, max: u64) -> Option<B> {
        self.take_settled(size, max, u64::MAX)
    }

    /// As [`FreeList::take`], among the buffers whose stamp is at most `settled`: the smallest size that has one,
    /// and of that size the most recently freed.
    pub fn take_settled(&mut self, size: u64, max: u64, settled: u64) -> Option<B> {
        let (found, at) = self
            .by_size
            .range(size..=max.max(size))
            .find_map(|(&s, list)| list.iter().rposition(|e| e.1 <= settled).map(|at| (s, at)))?;
        let list = self.by_size.get_mut(&found)?;
        let (tick, _, buffer) = list.remove(at)?;
        if list.is_empty() {
            self.by_size.remove(&found);
        }
        self.order.remove(&tick);
        self.bytes -= found;
        Some(buffer)
    }

    /// Keeps `buffer` of `size` bytes for reuse; returns the buffers evicted to stay within the budget (the caller
    /// destroys them), `buffer` itself when it alone exceeds the budget.
    pub fn put(&mut self, size: u64, buffer: B) -> Vec<B> {
        self.put_stamped(size, buffer, 0)
    }

    /// As [`FreeList::put`], stamping the buffer with `stamp`.
    pub fn put_stamped(&mut self, size: u64, buffer: B, stamp: u64) -> Vec<B> {
        if size > self.budget {
            return vec![buffer];
        }
        self.tick += 1;
        self.by_size.entry(size).or_default().push_back((self.tick, stamp, buffer));
        self.order.insert(self.tick, size);
        self.bytes += size;
        self.evict_over_budget()
    }

    /// Evicts the oldest buffers until the list is within its budget.
    fn evict_over_budget(&mut self) -> Vec<B> {
        let mut evicted = Vec::new();
        while self.bytes > self.budget {
            evicted.push(self.evict_oldest().expect("over budget means not empty"));
        }
        evicted
    }

    /// Removes and returns every buffer.
    pub fn drain(&mut self) -> Vec<B> {
        let mut all = Vec::with_capacity(self.len());
        while let Some(b) = self.evict_oldest() {
            all.push(b);
        }
        all
    }

    fn evict_oldest(&mut self) -> Option<B> {
        let (tick, size) = self.order.pop_first()?;
        let list = self.by_size.get_mut(&size).expect("ordered buffers are listed");
        let (t, _, buffer) = list.pop_front().expect("ordered buffers are listed");
        debug_assert_eq!(t, tick, "within a size, the oldest is first");
        if list.is_empty() {
            self.by_size.remove(&size);
        }
        self.bytes -= size;
        Some(buffer)
    }
}

#[cfg(test)]
mod tests {
    use super::FreeList;

    #[test]
    fn best_fit_within_the_bound() {
        let mut f = FreeList::new(1 << 20);
        assert!(f.put(512, 'a').is_empty());
        assert!(f.put(2048, 'b').is_empty());
        assert_eq!(f.take(256, 256), None, "512 is past the bound");
        assert_eq!(f.take(256, 1024), Some('a'));
        assert_eq!(f.take(1024, 4096), Some('b'));
        assert_eq!((f.bytes(), f.len()), (0, 0));
    }

    #[test]
    fn same_size_reuses_the_most_recent() {
        let mut f = FreeList::new(1 << 20);
        f.put(256, 1);
        f.put(256, 2);
        assert_eq!(f.take(256, 256), Some(2));
        assert_eq!(f.take(256, 256), Some(1));
    }

    #[test]
    fn a_settled_take_skips_buffers_stamped_later() {
        let mut f = FreeList::new(1 << 20);
        f.put_stamped(256, 'a', 5);
        f.put_stamped(256, 'b', 9);
        f.put_stamped(512, 'c', 1);
        assert_eq!(f.take_settled(256, 256, 4), None, "both 256s were used after 4");
        assert_eq!(f.take_settled(256, 512, 6), Some('a'), "the most recent settled one, skipping b");
        assert_eq!(f.take_settled(256, 512, 6), Some('c'), "then a larger settled one");
        assert_eq!(f.take_settled(256, 512, 6), None);
        assert_eq!(f.take(256, 512), Some('b'), "an unsettled take ignores stamps");
        assert_eq!((f.bytes(), f.len()), (0, 0));
        f.put_stamped(256, 'd', 3);
        f.put_stamped(256, 'e', 7);
        f.put_stamped(256, 'f', 2);
        assert_eq!(f.take_settled(256, 256, 3), Some('f'));
        assert_eq!(f.drain(), vec!['d', 'e'], "eviction order is still the order of freeing");
    }

    #[test]
    fn over_budget_evicts_the_oldest() {
        let mut f = FreeList::new(1000);
        assert!(f.put(400, 'a').is_empty());
        assert!(f.put(300, 'b').is_empty());
        assert_eq!(f.put(400, 'c'), vec!['a']);
        assert_eq!(f.bytes(), 700);
        assert_eq!(f.take(400, 400), Some('c'), "the newest 400 stayed");
        assert_eq!(f.put(5000, 'd'), vec!['d'], "larger than the whole budget");
        assert_eq!(f.drain(), vec!['b']);
        assert_eq!(f.bytes(), 0);
    }

    #[test]
    fn eviction_order_spans_sizes() {
        let mut f = FreeList::new(900);
        f.put(300, 'a');
        f.put(200, 'b');
        f.put(300, 'c');
        assert_eq!(f.put(300, 'd'), vec!['a']);
        assert_eq!(f.put(200, 'e'), vec!['b']);
        assert_eq!(f.drain(), vec!['c', 'd', 'e']);
    }
}
