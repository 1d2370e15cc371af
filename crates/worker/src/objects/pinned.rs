//! Which objects this process holds mapped from the node's store: a value read without a
//! copy (a numpy array from `get`) keeps its file mapped for as long as it lives, which Ray
//! reports as PINNED_IN_MEMORY. Read from `/proc/self/maps` when the list is asked for, so
//! the reads themselves cost nothing.

use std::collections::HashSet;

/// The file names (object ids) of the read-only shared mappings in `maps` (the text of
/// `/proc/<pid>/maps`). Writers map their files read-write: those are not pins.
pub fn read_only_shared(maps: &str) -> HashSet<String> {
    maps.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let perms = fields.nth(1)?;
            let path = fields.nth(3)?;
            let bytes = perms.as_bytes();
            let pinned = bytes.len() == 4 && bytes[0] == b'r' && bytes[1] == b'-' && bytes[3] == b's';
            pinned.then(|| path.rsplit('/').next().unwrap_or(path).to_string())
        })
        .collect()
}

/// This process's pins.
pub fn of_this_process() -> HashSet<String> {
    std::fs::read_to_string("/proc/self/maps").map(|maps| read_only_shared(&maps)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_read_only_shared_mappings_are_pins() {
        let maps = "\
7f00-7f10 r--s 00000000 00:1a 42 /dev/shm/oxray-objects-7/abc123
7f10-7f20 rw-s 00000000 00:1a 43 /dev/shm/oxray-objects-7/def456
7f20-7f30 r--p 00000000 08:01 44 /usr/lib/libc.so.6
7f30-7f40 rw-p 00000000 00:00 0
7f40-7f50 r--s 00000000 08:01 45 /tmp/oxray-spill-7/0f0f
";
        let pins = read_only_shared(maps);
        assert_eq!(pins, HashSet::from(["abc123".to_string(), "0f0f".to_string()]));
    }
}
