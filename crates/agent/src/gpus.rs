/// The node's GPUs, shared by job entrypoints and worker leases.
pub type SharedGpus = std::sync::Arc<std::sync::Mutex<GpuPool>>;

/// Which of this node's GPUs are free; jobs get whole devices.
pub struct GpuPool {
    free: Vec<u32>,
}

impl GpuPool {
    pub fn new(count: u32) -> Self {
        Self { free: (0..count).collect() }
    }

    /// `None` for jobs that ask for no GPU; the head only places a job where enough are free.
    pub fn take(&mut self, count: u32) -> Option<Vec<u32>> {
        if count == 0 {
            return None;
        }
        let n = (count as usize).min(self.free.len());
        Some(self.free.drain(..n).collect())
    }

    /// The devices of a lease asking for `amount` GPUs: whole devices of their own for one
    /// or more; a fraction shares the lowest device that is not given out whole (Ray packs
    /// fractions onto one device the same way).
    pub fn take_amount(&mut self, amount: f64) -> Option<Vec<u32>> {
        if amount <= 0.0 {
            return None;
        }
        if amount < 1.0 {
            return Some(self.free.first().map(|id| vec![*id]).unwrap_or_default());
        }
        self.take(amount.ceil() as u32)
    }

    /// Gives back what `take_amount` gave (a fraction's shared device was never taken).
    pub fn give_back_amount(&mut self, amount: f64, ids: &[u32]) {
        if amount >= 1.0 {
            self.give_back(ids);
        }
    }

    pub fn give_back(&mut self, ids: &[u32]) {
        self.free.extend_from_slice(ids);
        self.free.sort_unstable();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hands_out_distinct_devices() {
        let mut pool = GpuPool::new(3);
        assert_eq!(pool.take(0), None);
        let a = pool.take(2).unwrap();
        let b = pool.take(1).unwrap();
        assert_eq!((a.clone(), b.clone()), (vec![0, 1], vec![2]));
        pool.give_back(&a);
        assert_eq!(pool.take(2).unwrap(), vec![0, 1]);
    }

    #[test]
    fn fractions_share_a_device_that_is_not_given_out_whole() {
        let mut pool = GpuPool::new(2);
        assert_eq!(pool.take_amount(0.0), None);
        assert_eq!(pool.take_amount(0.5), Some(vec![0]));
        assert_eq!(pool.take_amount(0.5), Some(vec![0]));
        let whole = pool.take_amount(1.0).unwrap();
        assert_eq!(whole, vec![0]);
        assert_eq!(pool.take_amount(0.25), Some(vec![1]));
        pool.give_back_amount(0.25, &[1]);
        assert_eq!(pool.take_amount(1.0), Some(vec![1]));
        pool.give_back_amount(1.0, &whole);
        assert_eq!(pool.take_amount(2.0), Some(vec![0]));
    }
}
