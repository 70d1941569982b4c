//! One memory timeline updated per decision: bytes live at each step of the
//! schedule, with range updates and the peak (largest value, first step on
//! ties) in O(log n). The planner keeps one for device memory and one for
//! host memory instead of re-simulating the whole graph per probe.

/// A timeline with range add and range/global maximum (a lazy segment tree).
#[derive(Clone, Debug)]
pub struct Tracker {
    len: usize,
    /// Maximum of each segment's subtree, lazy adds included.
    max: Vec<i64>,
    /// Add pending for each segment's whole subtree.
    add: Vec<i64>,
}

impl Tracker {
    /// A tracker holding `values`, one per step.
    pub fn new(values: &[u64]) -> Tracker {
        let len = values.len().max(1);
        let mut t = Tracker { len, max: vec![0; 4 * len], add: vec![0; 4 * len] };
        t.build(1, 0, len - 1, values);
        t
    }

    fn build(&mut self, node: usize, lo: usize, hi: usize, values: &[u64]) {
        if lo == hi {
            self.max[node] = values.get(lo).map_or(0, |&v| v as i64);
            return;
        }
        let mid = (lo + hi) / 2;
        self.build(2 * node, lo, mid, values);
        self.build(2 * node + 1, mid + 1, hi, values);
        self.max[node] = self.max[2 * node].max(self.max[2 * node + 1]);
    }

    /// Adds `delta` bytes to every step in `from..=to` (nothing when empty).
    pub fn add(&mut self, from: usize, to: usize, delta: i64) {
        if from <= to && from < self.len && delta != 0 {
            self.update(1, 0, self.len - 1, from, to.min(self.len - 1), delta);
        }
    }

    fn update(&mut self, node: usize, lo: usize, hi: usize, from: usize, to: usize, delta: i64) {
        if to < lo || hi < from {
            return;
        }
        if from <= lo && hi <= to {
            self.max[node] += delta;
            self.add[node] += delta;
            return;
        }
        let mid = (lo + hi) / 2;
        self.update(2 * node, lo, mid, from, to, delta);
        self.update(2 * node + 1, mid + 1, hi, from, to, delta);
        self.max[node] = self.max[2 * node].max(self.max[2 * node + 1]) + self.add[node];
    }

    /// Largest value over `from..=to` (0 when empty).
    pub fn max_in(&self, from: usize, to: usize) -> u64 {
        if from > to || from >= self.len {
            return 0;
        }
        self.query(1, 0, self.len - 1, from, to.min(self.len - 1)).max(0) as u64
    }

    fn query(&self, node: usize, lo: usize, hi: usize, from: usize, to: usize) -> i64 {
        if to < lo || hi < from {
            return i64::MIN / 2;
        }
        if from <= lo && hi <= to {
            return self.max[node];
        }
        let mid = (lo + hi) / 2;
        let below = self.query(2 * node, lo, mid, from, to).max(self.query(2 * node + 1, mid + 1, hi, from, to));
        below + self.add[node]
    }

    /// (step, bytes) of the peak: the first step holding the largest value.
    pub fn peak(&self) -> (usize, u64) {
        let (mut node, mut lo, mut hi) = (1, 0, self.len - 1);
        let target = self.max[1];
        let mut above = 0;
        while lo < hi {
            above += self.add[node];
            let mid = (lo + hi) / 2;
            if self.max[2 * node] + above == target {
                (node, hi) = (2 * node, mid);
            } else {
                (node, lo) = (2 * node + 1, mid + 1);
            }
        }
        (lo, target.max(0) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::Tracker;

    #[test]
    fn range_updates_move_the_peak_like_a_plain_array() {
        let mut plain: Vec<i64> = (0..37).map(|i| 1000 + (i * 7919 % 101) as i64).collect();
        let mut t = Tracker::new(&plain.iter().map(|&v| v as u64).collect::<Vec<_>>());
        let ops = [(3, 20, -50), (0, 36, 5), (10, 10, 300), (10, 12, -299), (30, 36, 80), (0, 5, 200)];
        for (from, to, delta) in ops {
            t.add(from, to, delta);
            for v in &mut plain[from..=to] {
                *v += delta;
            }
            let max = *plain.iter().max().unwrap();
            let first = plain.iter().position(|&v| v == max).unwrap();
            assert_eq!(t.peak(), (first, max as u64));
            assert_eq!(t.max_in(4, 17), *plain[4..=17].iter().max().unwrap() as u64);
            assert_eq!(t.max_in(11, 11), plain[11] as u64);
        }
    }
}
