//! Frames held until their time: one queue per worker for all its impaired links (no
//! thread or timer per link), a binary heap ordered by send time, and a bound per link
//! so that one slow link cannot take the worker's memory. Generic over what is held (a
//! UMEM frame, a buffer), so that it is tested without a socket.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::hash::Hash;
use std::time::Instant;

struct Entry<K, T> {
    at: Instant,
    /// Ties keep the order frames were held in.
    seq: u64,
    key: K,
    item: T,
}

impl<K, T> PartialEq for Entry<K, T> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl<K, T> Eq for Entry<K, T> {}
impl<K, T> PartialOrd for Entry<K, T> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<K, T> Ord for Entry<K, T> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

pub struct Held<K, T> {
    heap: BinaryHeap<Reverse<Entry<K, T>>>,
    /// How many items each key holds, and the latest time among them.
    per_key: HashMap<K, (usize, Instant)>,
    limit_per_key: usize,
    seq: u64,
}

impl<K: Hash + Eq + Clone, T> Held<K, T> {
    /// At most `limit_per_key` items held for any one key.
    pub fn new(limit_per_key: usize) -> Held<K, T> {
        Held {
            heap: BinaryHeap::new(),
            per_key: HashMap::new(),
            limit_per_key,
            seq: 0,
        }
    }

    /// Holds `item` until `at`; gives it back when its key already holds its limit.
    pub fn hold(&mut self, key: K, at: Instant, item: T) -> Result<(), T> {
        let (count, latest) = self.per_key.entry(key.clone()).or_insert((0, at));
        if *count >= self.limit_per_key {
            return Err(item);
        }
        *count += 1;
        *latest = (*latest).max(at);
        self.seq += 1;
        self.heap.push(Reverse(Entry {
            at,
            seq: self.seq,
            key,
            item,
        }));
        Ok(())
    }

    /// The next item whose time has come, with its key.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<(K, T)> {
        if self.heap.peek()?.0.at > now {
            return None;
        }
        let Reverse(entry) = self.heap.pop()?;
        if let Some((count, _)) = self.per_key.get_mut(&entry.key) {
            *count -= 1;
            if *count == 0 {
                self.per_key.remove(&entry.key);
            }
        }
        Some((entry.key, entry.item))
    }

    /// When the next item is due: what the worker's sleep must not pass.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.heap.peek().map(|e| e.0.at)
    }

    pub fn held(&self, key: &K) -> usize {
        self.per_key.get(key).map_or(0, |&(count, _)| count)
    }

    /// The latest time of the items `key` holds: what a frame that must not overtake
    /// them waits for.
    pub fn latest(&self, key: &K) -> Option<Instant> {
        self.per_key.get(key).map(|&(_, latest)| latest)
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Takes out everything held for `key` (its link is going), in time order.
    pub(crate) fn drain_key(&mut self, key: &K) -> Vec<T> {
        let mut kept = BinaryHeap::with_capacity(self.heap.len());
        let mut taken = Vec::new();
        for Reverse(entry) in std::mem::take(&mut self.heap)
            .into_sorted_vec()
            .into_iter()
            .rev()
        {
            if entry.key == *key {
                taken.push(entry.item);
            } else {
                kept.push(Reverse(entry));
            }
        }
        self.heap = kept;
        self.per_key.remove(key);
        taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn items_come_out_in_time_order_ties_in_the_order_held() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut held = Held::new(10);
        held.hold("a", t0 + ms(5), 1).unwrap();
        held.hold("b", t0 + ms(1), 2).unwrap();
        held.hold("a", t0 + ms(5), 3).unwrap();
        held.hold("b", t0 + ms(3), 4).unwrap();
        assert_eq!(held.next_due(), Some(t0 + ms(1)));
        assert_eq!(held.pop_due(t0), None);
        let mut out = Vec::new();
        while let Some((_, item)) = held.pop_due(t0 + ms(10)) {
            out.push(item);
        }
        assert_eq!(out, [2, 4, 1, 3]);
        assert!(held.is_empty());
    }

    #[test]
    fn a_key_holds_at_most_its_limit_and_draining_it_leaves_the_others() {
        let t0 = Instant::now();
        let mut held = Held::new(2);
        assert!(held.hold(1, t0, 'a').is_ok());
        assert!(held.hold(1, t0, 'b').is_ok());
        assert_eq!(held.hold(1, t0, 'c'), Err('c'));
        assert!(held.hold(2, t0, 'd').is_ok());
        assert_eq!(held.held(&1), 2);
        assert_eq!(held.latest(&1), Some(t0));
        assert_eq!(held.latest(&3), None);
        assert_eq!(held.drain_key(&1), ['a', 'b']);
        assert_eq!(held.held(&1), 0);
        assert_eq!(held.pop_due(t0), Some((2, 'd')));
        assert!(held.hold(1, t0, 'e').is_ok());
    }
}
