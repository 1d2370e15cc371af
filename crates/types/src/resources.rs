use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ResourceError {
    #[error("resource {name:?} has an invalid amount {amount}: amounts must be finite and non-negative")]
    InvalidAmount { name: String, amount: f64 },
    #[error("resource {name:?} has {amount}, more than the largest amount a node can have ({MAX_AMOUNT:e})")]
    TooLarge { name: String, amount: f64 },
    #[error("a resource name must not be empty")]
    EmptyName,
}

/// Units of a resource per whole one: amounts are kept as integers of 1/10000, as Ray keeps
/// them, so sums and differences are exact and `0.1 + 0.2` CPUs fit in `0.3`.
const UNITS: f64 = 10_000.0;

/// The largest amount of one resource a set holds: u64 units (about 1.8 PB of memory).
pub const MAX_AMOUNT: f64 = u64::MAX as f64 / UNITS;

fn to_units(amount: f64) -> u64 {
    // Saturating cast: a petabyte of memory still fits, and a negative amount counts as none.
    (amount * UNITS).round() as u64
}

fn from_units(units: u64) -> f64 {
    units as f64 / UNITS
}

/// Named amounts of resources (CPU, GPU, memory in bytes, custom names), ordered by name.
/// Arithmetic never goes below zero: taking more than there is fails (`take`) or leaves
/// nothing (`minus`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ResourceSet(BTreeMap<String, u64>);

impl ResourceSet {
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets an amount after checking it; zero amounts are kept so a node can say "0 GPU".
    pub fn set(&mut self, name: impl Into<String>, amount: f64) -> Result<(), ResourceError> {
        let name = name.into();
        if name.is_empty() {
            return Err(ResourceError::EmptyName);
        }
        if !amount.is_finite() || amount < 0.0 {
            return Err(ResourceError::InvalidAmount { name, amount });
        }
        if amount >= MAX_AMOUNT {
            return Err(ResourceError::TooLarge { name, amount });
        }
        self.0.insert(name, to_units(amount));
        Ok(())
    }

    pub fn get(&self, name: &str) -> f64 {
        from_units(self.units(name))
    }

    fn units(&self, name: &str) -> u64 {
        self.0.get(name).copied().unwrap_or(0)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, f64)> {
        self.0.iter().map(|(k, v)| (k.as_str(), from_units(*v)))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Adds every amount of `other` to this set.
    pub fn add(&mut self, other: &ResourceSet) {
        for (name, units) in &other.0 {
            let mine = self.0.entry(name.clone()).or_insert(0);
            *mine = mine.saturating_add(*units);
        }
    }

    /// Whether every amount this set asks for is there in `offer`.
    pub fn fits_in(&self, offer: &ResourceSet) -> bool {
        self.0.iter().all(|(name, units)| *units <= offer.units(name))
    }

    /// What is left of this set once `other` is taken out, none of a resource where `other`
    /// has more (a blocked worker's CPUs taken back may briefly exceed what was free).
    pub fn minus(&self, other: &ResourceSet) -> ResourceSet {
        Self(self.0.iter().map(|(k, v)| (k.clone(), v.saturating_sub(other.units(k)))).collect())
    }

    /// Takes `request` out of this set when it fits, and says whether it did.
    pub fn take(&mut self, request: &ResourceSet) -> bool {
        if !request.fits_in(self) {
            return false;
        }
        *self = self.minus(request);
        true
    }

    /// The amounts as numbers, for the wire and for messages.
    pub fn to_map(&self) -> BTreeMap<String, f64> {
        self.iter().map(|(k, v)| (k.to_string(), v)).collect()
    }

    /// The amounts above zero, without the `node:` markers, as `{CPU: 2, GPU: 1}`: how a
    /// request or a node's offer reads in a message.
    pub fn describe(&self) -> String {
        let parts: Vec<String> = self
            .iter()
            .filter(|(k, v)| *v > 0.0 && !k.starts_with("node:"))
            .map(|(k, v)| format!("{k}: {v}"))
            .collect();
        format!("{{{}}}", parts.join(", "))
    }
}

impl Serialize for ResourceSet {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_map().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for ResourceSet {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let map = BTreeMap::<String, f64>::deserialize(deserializer)?;
        ResourceSet::try_from(map).map_err(serde::de::Error::custom)
    }
}

impl TryFrom<BTreeMap<String, f64>> for ResourceSet {
    type Error = ResourceError;
    fn try_from(map: BTreeMap<String, f64>) -> Result<Self, Self::Error> {
        let mut set = ResourceSet::new();
        for (name, amount) in map {
            set.set(name, amount)?;
        }
        Ok(set)
    }
}

impl FromIterator<(String, f64)> for ResourceSet {
    /// Collects without validation, for amounts already known to be valid (a negative or
    /// NaN one counts as none).
    fn from_iter<I: IntoIterator<Item = (String, f64)>>(iter: I) -> Self {
        Self(iter.into_iter().map(|(k, v)| (k, to_units(v))).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(pairs: &[(&str, f64)]) -> ResourceSet {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn rejects_negative_and_nan() {
        let mut r = ResourceSet::new();
        assert!(r.set("CPU", -1.0).is_err());
        assert!(r.set("CPU", f64::NAN).is_err());
        assert!(r.set("", 1.0).is_err());
        assert!(r.set("CPU", 0.0).is_ok());
        assert!(matches!(r.set("memory", 2e15), Err(ResourceError::TooLarge { .. })));
        assert!(r.set("memory", 1e15).is_ok(), "a petabyte");
    }

    #[test]
    fn adds_sets() {
        let mut a = set(&[("CPU", 2.0)]);
        a.add(&set(&[("CPU", 1.5), ("GPU", 1.0)]));
        assert_eq!(a.get("CPU"), 3.5);
        assert_eq!(a.get("GPU"), 1.0);
        assert_eq!(a.get("TPU"), 0.0);
    }

    #[test]
    fn fractions_add_up_exactly() {
        let mut a = set(&[("CPU", 0.1)]);
        a.add(&set(&[("CPU", 0.2)]));
        assert!(a.fits_in(&set(&[("CPU", 0.3)])));
        assert!(set(&[("CPU", 0.3)]).fits_in(&a));
    }

    #[test]
    fn never_goes_below_zero() {
        let mut free = set(&[("CPU", 1.0), ("GPU", 1.0)]);
        assert!(!free.take(&set(&[("CPU", 2.0)])), "more than there is");
        assert_eq!(free.get("CPU"), 1.0, "a refused take leaves it as it was");
        assert!(free.take(&set(&[("CPU", 0.5)])));
        assert_eq!(free.get("CPU"), 0.5);
        assert_eq!(free.minus(&set(&[("CPU", 3.0), ("TPU", 1.0)])).get("CPU"), 0.0);
        assert!(!set(&[("TPU", 1.0)]).fits_in(&free), "a resource the offer lacks");
        assert!(set(&[("TPU", 0.0)]).fits_in(&free), "asking for none of one always fits");
    }

    #[test]
    fn reads_and_writes_numbers() {
        let r = set(&[("CPU", 1.5), ("memory", 2e12)]);
        let json = serde_json::to_string(&r).unwrap();
        assert_eq!(json, r#"{"CPU":1.5,"memory":2000000000000.0}"#);
        assert_eq!(serde_json::from_str::<ResourceSet>(&json).unwrap(), r);
        assert!(serde_json::from_str::<ResourceSet>(r#"{"CPU":-1}"#).is_err());
        assert_eq!(r.describe(), "{CPU: 1.5, memory: 2000000000000}");
    }
}
