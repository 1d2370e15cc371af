//! Ray's label selectors, matched against a node's labels: the one rule shared by the
//! scheduling of tasks and actors and the placement of bundles.

use std::collections::BTreeMap;

/// Label name to `v`, `!v`, `in(a,b)` or `!in(a,b)`; empty selects every node.
pub type Selector = BTreeMap<String, String>;

/// One selector value against a node's label (None: the node lacks it).
fn value_matches(wanted: &str, actual: Option<&str>) -> bool {
    let (negated, wanted) = match wanted.strip_prefix('!') {
        Some(rest) => (true, rest),
        None => (false, wanted),
    };
    let hit = match wanted.strip_prefix("in(").and_then(|w| w.strip_suffix(')')) {
        Some(list) => actual.is_some_and(|a| list.split(',').any(|v| v.trim() == a)),
        None => actual == Some(wanted),
    };
    hit != negated
}

/// Whether a node whose label `name` is `label(name)` meets every term of the selector.
pub fn selector_matches<'a>(selector: &Selector, label: impl Fn(&str) -> Option<&'a str>) -> bool {
    selector.iter().all(|(key, wanted)| value_matches(wanted, label(key)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn selector(pairs: &[(&str, &str)]) -> Selector {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn node(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<&'static str> {
        move |key| pairs.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }

    #[test]
    fn values_match_as_ray_reads_them() {
        assert!(value_matches("a", Some("a")) && !value_matches("a", Some("b")) && !value_matches("a", None));
        assert!(value_matches("!a", Some("b")) && value_matches("!a", None) && !value_matches("!a", Some("a")));
        assert!(value_matches("in(a, b)", Some("b")) && !value_matches("in(a,b)", Some("c")));
        assert!(value_matches("!in(a,b)", Some("c")) && value_matches("!in(a,b)", None));
    }

    #[test]
    fn equality_negation_and_sets() {
        let gpu = node(&[("accelerator", "A100"), ("zone", "b")]);
        assert!(selector_matches(&selector(&[]), &gpu));
        assert!(selector_matches(&selector(&[("accelerator", "A100")]), &gpu));
        assert!(!selector_matches(&selector(&[("accelerator", "H100")]), &gpu));
        assert!(selector_matches(&selector(&[("accelerator", "!H100")]), &gpu));
        assert!(selector_matches(&selector(&[("zone", "in(a, b)")]), &gpu));
        assert!(!selector_matches(&selector(&[("zone", "!in(a,b)")]), &gpu));
        assert!(!selector_matches(&selector(&[("zone", "b"), ("accelerator", "H100")]), &gpu));
    }

    #[test]
    fn a_missing_label_matches_only_negations() {
        let bare = node(&[]);
        assert!(!selector_matches(&selector(&[("zone", "a")]), &bare));
        assert!(!selector_matches(&selector(&[("zone", "in(a)")]), &bare));
        assert!(selector_matches(&selector(&[("zone", "!a")]), &bare));
        assert!(selector_matches(&selector(&[("zone", "!in(a,b)")]), &bare));
    }
}
