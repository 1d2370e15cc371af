/// Turns a byte stream into text without splitting a multi-byte character across chunks.
#[derive(Default)]
pub struct Utf8Carry(Vec<u8>);

impl Utf8Carry {
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.0.extend_from_slice(bytes);
        let complete = match std::str::from_utf8(&self.0) {
            Ok(_) => self.0.len(),
            // Only an unfinished character at the very end waits for more bytes.
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(_) => self.0.len(),
        };
        let rest = self.0.split_off(complete);
        let text = String::from_utf8_lossy(&self.0).into_owned();
        self.0 = rest;
        text
    }

    pub fn finish(&mut self) -> String {
        let text = String::from_utf8_lossy(&self.0).into_owned();
        self.0.clear();
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_split_characters_whole() {
        let bytes = "héllo✓".as_bytes();
        let mut carry = Utf8Carry::default();
        let mut out = String::new();
        for b in bytes {
            out.push_str(&carry.push(std::slice::from_ref(b)));
        }
        out.push_str(&carry.finish());
        assert_eq!(out, "héllo✓");
    }

    #[test]
    fn replaces_invalid_bytes() {
        let mut carry = Utf8Carry::default();
        assert_eq!(carry.push(b"a\xffb"), "a\u{fffd}b");
    }
}
