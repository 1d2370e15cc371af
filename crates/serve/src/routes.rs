//! Which application an HTTP path belongs to, and which replica takes a request.

/// The application whose route prefix is the longest that matches `path`: a prefix matches
/// the path itself or the path followed by "/" (so "/a" takes "/a/b" but not "/ab").
pub fn match_route<'a>(routes: &'a [(String, String)], path: &str) -> Option<&'a (String, String)> {
    routes
        .iter()
        .filter(|(prefix, _)| {
            prefix == "/"
                || path == prefix
                || (path.starts_with(prefix.as_str()) && path.as_bytes().get(prefix.len()) == Some(&b'/'))
        })
        .max_by_key(|(prefix, _)| prefix.len())
}

/// Power of two choices: of two replicas drawn at random among those with room, the one
/// with fewer requests in flight. `in_flight[i]` is replica i's count; `None` when every
/// replica is at `capacity`.
pub fn pick(in_flight: &[u32], capacity: u32, draw: &mut impl FnMut(usize) -> usize) -> Option<usize> {
    let open: Vec<usize> = (0..in_flight.len()).filter(|&i| in_flight[i] < capacity).collect();
    match open.len() {
        0 => None,
        1 => Some(open[0]),
        n => {
            let a = open[draw(n)];
            let mut b = open[draw(n - 1)];
            if b == a {
                b = open[n - 1];
            }
            Some(if in_flight[b] < in_flight[a] { b } else { a })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn routes(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter().map(|(p, a)| (p.to_string(), a.to_string())).collect()
    }

    #[test]
    fn the_longest_matching_prefix_wins() {
        let table = routes(&[("/", "root"), ("/api", "api"), ("/api/v2", "v2")]);
        let app = |path| match_route(&table, path).map(|(_, a)| a.as_str());
        assert_eq!(app("/"), Some("root"));
        assert_eq!(app("/other"), Some("root"));
        assert_eq!(app("/api"), Some("api"));
        assert_eq!(app("/api/x"), Some("api"));
        assert_eq!(app("/apix"), Some("root"));
        assert_eq!(app("/api/v2/models"), Some("v2"));
    }

    #[test]
    fn no_root_means_unknown_paths_match_nothing() {
        let table = routes(&[("/a", "a")]);
        assert!(match_route(&table, "/b").is_none());
        assert!(match_route(&table, "/ab").is_none());
        assert!(match_route(&table, "/a/").is_some());
    }

    #[test]
    fn picks_the_less_loaded_of_two_and_never_a_full_one() {
        let mut first = |n: usize| n - 1;
        assert_eq!(pick(&[5, 5, 5], 5, &mut first), None);
        assert_eq!(pick(&[5, 1, 5], 5, &mut first), Some(1));
        // Draws land on replicas 2 (in flight 3) and 0 (in flight 1): the lighter wins.
        let mut draws = [2usize, 0].into_iter();
        assert_eq!(pick(&[1, 4, 3], 5, &mut |_| draws.next().unwrap()), Some(0));
        let mut same = |_: usize| 0;
        assert_eq!(pick(&[2, 0], 5, &mut same), Some(1));
    }
}
