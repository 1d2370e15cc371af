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
}
