//! A node agent's accounts: what its leases and placement group bundles hold of the node.

use oxray_types::ResourceSet;
use std::collections::HashMap;

/// A placement group's bundle: `(group id, bundle index)`.
pub type BundleKey = (String, u32);

/// Resources reserved for a bundle, and what its leases use of them.
#[derive(Debug, Clone, Default, PartialEq)]
struct Bundle {
    total: ResourceSet,
    used: ResourceSet,
}

/// Why a lease cannot come out of a group's bundles here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BundleRefusal {
    /// The group has no such bundle on this node (removed, or placed elsewhere).
    NotHere,
    /// No bundle of the group here could ever hold the request.
    NeverFits,
}

/// Which bundles of a group a lease may use: one, or any (`None`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleWant<'a> {
    pub group: &'a str,
    pub index: Option<u32>,
}

impl BundleWant<'_> {
    fn covers(&self, key: &BundleKey) -> bool {
        key.0 == self.group && self.index.is_none_or(|i| i == key.1)
    }
}

/// The node's total and what is held of it: leased out directly, or reserved for bundles
/// (whose leases then take from the bundle). Nothing here ever goes below zero.
#[derive(Debug, Clone, Default)]
pub struct Ledger {
    total: ResourceSet,
    /// Leased out, plus every bundle's reservation.
    used: ResourceSet,
    bundles: HashMap<BundleKey, Bundle>,
}

impl Ledger {
    pub fn new(total: ResourceSet) -> Self {
        Self { total, ..Default::default() }
    }

    pub fn total(&self) -> &ResourceSet {
        &self.total
    }

    /// What is neither leased out nor reserved.
    pub fn free(&self) -> ResourceSet {
        self.total.minus(&self.used)
    }

    /// Whether the node could hold the request were it idle.
    pub fn could_hold(&self, request: &ResourceSet) -> bool {
        request.fits_in(&self.total)
    }

    /// Takes the request from the free resources if they hold it now.
    pub fn take(&mut self, request: &ResourceSet) -> bool {
        let fits = request.fits_in(&self.free());
        if fits {
            self.used.add(request);
        }
        fits
    }

    /// Takes the request from the lowest-numbered bundle wanted that holds it now: `Ok(None)`
    /// while none has room.
    pub fn take_from_bundle(
        &mut self,
        request: &ResourceSet,
        want: &BundleWant,
    ) -> Result<Option<BundleKey>, BundleRefusal> {
        let mut ours: Vec<(&BundleKey, &mut Bundle)> =
            self.bundles.iter_mut().filter(|(k, _)| want.covers(k)).collect();
        if ours.is_empty() {
            return Err(BundleRefusal::NotHere);
        }
        if !ours.iter().any(|(_, b)| request.fits_in(&b.total)) {
            return Err(BundleRefusal::NeverFits);
        }
        ours.sort_by_key(|(k, _)| k.1);
        let Some((key, bundle)) = ours.into_iter().find(|(_, b)| request.fits_in(&b.total.minus(&b.used))) else {
            return Ok(None);
        };
        bundle.used.add(request);
        Ok(Some(key.clone()))
    }

    /// Gives back what a lease held; from a bundle already released, nothing.
    pub fn release(&mut self, resources: &ResourceSet, bundle: Option<&BundleKey>) {
        match bundle {
            Some(key) => {
                if let Some(b) = self.bundles.get_mut(key) {
                    b.used = b.used.minus(resources);
                }
            }
            None => self.used = self.used.minus(resources),
        }
    }

    /// Takes back what a lease gave up for a while (a blocked worker's CPUs), even past the
    /// total for a moment: the worker goes on either way. False when its bundle is gone.
    pub fn retake(&mut self, resources: &ResourceSet, bundle: Option<&BundleKey>) -> bool {
        match bundle {
            Some(key) => match self.bundles.get_mut(key) {
                Some(b) => b.used.add(resources),
                None => return false,
            },
            None => self.used.add(resources),
        }
        true
    }

    /// Reserves a group's bundles not reserved yet, all or none, if the free resources hold
    /// them now; Err with what they sum to when they do not.
    pub fn reserve(&mut self, group: &str, bundles: Vec<(u32, ResourceSet)>) -> Result<(), ResourceSet> {
        let new: Vec<(u32, ResourceSet)> =
            bundles.into_iter().filter(|(i, _)| !self.bundles.contains_key(&(group.to_string(), *i))).collect();
        let mut sum = ResourceSet::new();
        for (_, r) in &new {
            sum.add(r);
        }
        if !self.take(&sum) {
            return Err(sum);
        }
        for (index, total) in new {
            self.bundles.insert((group.to_string(), index), Bundle { total, used: ResourceSet::new() });
        }
        Ok(())
    }

    /// Frees a group's bundles here (all when `indexes` is empty); returns which went.
    pub fn unreserve(&mut self, group: &str, indexes: &[u32]) -> Vec<BundleKey> {
        let keys: Vec<BundleKey> = self
            .bundles
            .keys()
            .filter(|k| k.0 == group && (indexes.is_empty() || indexes.contains(&k.1)))
            .cloned()
            .collect();
        for key in &keys {
            let b = self.bundles.remove(key).expect("present");
            self.used = self.used.minus(&b.total);
        }
        keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpus(n: f64) -> ResourceSet {
        [("CPU".to_string(), n)].into_iter().collect()
    }

    #[test]
    fn leases_take_and_give_back() {
        let mut l = Ledger::new(cpus(2.0));
        assert!(l.take(&cpus(1.5)));
        assert!(!l.take(&cpus(1.0)));
        assert_eq!(l.free(), cpus(0.5));
        l.release(&cpus(1.5), None);
        assert_eq!(l.free(), cpus(2.0));
        l.release(&cpus(1.0), None);
        assert_eq!(l.free(), cpus(2.0), "giving back twice frees nothing more");
    }

    #[test]
    fn bundles_reserve_all_or_none_and_hold_their_leases() {
        let mut l = Ledger::new(cpus(4.0));
        assert_eq!(l.reserve("g", vec![(0, cpus(2.0)), (1, cpus(3.0))]), Err(cpus(5.0)));
        assert_eq!(l.free(), cpus(4.0), "none reserved");
        l.reserve("g", vec![(0, cpus(1.0)), (1, cpus(2.0))]).unwrap();
        l.reserve("g", vec![(0, cpus(1.0))]).unwrap();
        assert_eq!(l.free(), cpus(1.0), "a bundle reserved again counts once");
        let any = BundleWant { group: "g", index: None };
        assert_eq!(l.take_from_bundle(&cpus(1.0), &any), Ok(Some(("g".into(), 0))));
        assert_eq!(l.take_from_bundle(&cpus(1.0), &any), Ok(Some(("g".into(), 1))));
        assert_eq!(l.take_from_bundle(&cpus(1.5), &any), Ok(None), "room later");
        assert_eq!(l.take_from_bundle(&cpus(3.0), &any), Err(BundleRefusal::NeverFits));
        assert_eq!(
            l.take_from_bundle(&cpus(1.0), &BundleWant { group: "h", index: None }),
            Err(BundleRefusal::NotHere)
        );
        assert_eq!(l.unreserve("g", &[]).len(), 2);
        assert_eq!(l.free(), cpus(4.0));
        l.release(&cpus(1.0), Some(&("g".into(), 0)));
        assert_eq!(l.free(), cpus(4.0), "a lease of a removed bundle frees nothing of the node");
    }

    #[test]
    fn a_blocked_worker_gives_its_cpus_back_for_a_while() {
        let mut l = Ledger::new(cpus(1.0));
        assert!(l.take(&cpus(1.0)));
        l.release(&cpus(1.0), None);
        assert!(l.take(&cpus(1.0)), "the task it waits for runs");
        assert!(l.retake(&cpus(1.0), None));
        assert_eq!(l.free(), cpus(0.0), "past the total for a moment, never below zero");
        l.release(&cpus(1.0), None);
        assert_eq!(l.free(), cpus(0.0));
        l.release(&cpus(1.0), None);
        assert_eq!(l.free(), cpus(1.0));
    }
}
