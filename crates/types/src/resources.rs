use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ResourceError {
    #[error("resource {name:?} has an invalid amount {amount}: amounts must be finite and non-negative")]
    InvalidAmount { name: String, amount: f64 },
    #[error("a resource name must not be empty")]
    EmptyName,
}

/// Named amounts of resources (CPU, GPU, memory in bytes, custom names), ordered by name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ResourceSet(BTreeMap<String, f64>);

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
        self.0.insert(name, amount);
        Ok(())
    }

    pub fn get(&self, name: &str) -> f64 {
        self.0.get(name).copied().unwrap_or(0.0)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, f64)> {
        self.0.iter().map(|(k, v)| (k.as_str(), *v))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Adds every amount of `other` to this set.
    pub fn add(&mut self, other: &ResourceSet) {
        for (name, amount) in other.iter() {
            *self.0.entry(name.to_string()).or_insert(0.0) += amount;
        }
    }

    pub fn as_map(&self) -> &BTreeMap<String, f64> {
        &self.0
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
    /// Collects without validation; for amounts that are already known to be valid.
    fn from_iter<I: IntoIterator<Item = (String, f64)>>(iter: I) -> Self {
        Self(iter.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_negative_and_nan() {
        let mut r = ResourceSet::new();
        assert!(r.set("CPU", -1.0).is_err());
        assert!(r.set("CPU", f64::NAN).is_err());
        assert!(r.set("", 1.0).is_err());
        assert!(r.set("CPU", 0.0).is_ok());
    }

    #[test]
    fn adds_sets() {
        let mut a = ResourceSet::new();
        a.set("CPU", 2.0).unwrap();
        let mut b = ResourceSet::new();
        b.set("CPU", 1.5).unwrap();
        b.set("GPU", 1.0).unwrap();
        a.add(&b);
        assert_eq!(a.get("CPU"), 3.5);
        assert_eq!(a.get("GPU"), 1.0);
        assert_eq!(a.get("TPU"), 0.0);
    }
}
