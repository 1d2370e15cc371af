use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

const NODE_ID_BYTES: usize = 28;
const PLACEMENT_GROUP_ID_BYTES: usize = 18;

/// A job's id as Ray's JobID: a number the head hands out in order from 1, shown as its
/// four bytes in little-endian hex (job 1 is "01000000"). 0 stands for no job.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobId(pub u32);

impl JobId {
    pub fn hex(self) -> String {
        hex::encode(self.0.to_le_bytes())
    }

    /// `hex` back; `None` for anything else.
    pub fn parse(text: &str) -> Option<Self> {
        let bytes: [u8; 4] = hex::decode(text).ok()?.try_into().ok()?;
        Some(Self(u32::from_le_bytes(bytes)))
    }

    /// The hex, or nothing for no job (as the state API shows it).
    pub fn hex_or_empty(self) -> String {
        if self.0 == 0 {
            String::new()
        } else {
            self.hex()
        }
    }
}

/// A new placement group id: 18 random bytes as 36 hex characters, as in Ray. Chosen by the
/// group's creator or, when it gives none, by the head.
pub fn new_placement_group_id() -> String {
    let mut bytes = [0u8; PLACEMENT_GROUP_ID_BYTES];
    getrandom::fill(&mut bytes).expect("the operating system has no random source");
    hex::encode(bytes)
}

pub fn is_placement_group_id(text: &str) -> bool {
    text.len() == PLACEMENT_GROUP_ID_BYTES * 2 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IdError {
    #[error("invalid node id {0:?}: expected {len} hex characters", len = NODE_ID_BYTES * 2)]
    InvalidNodeId(String),
}

/// A node's identity: 28 random bytes shown as 56 hex characters, as in Ray.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct NodeId([u8; NODE_ID_BYTES]);

impl NodeId {
    pub fn random() -> Self {
        let mut bytes = [0u8; NODE_ID_BYTES];
        getrandom::fill(&mut bytes).expect("the operating system has no random source");
        Self(bytes)
    }

    pub fn hex(&self) -> String {
        hex::encode(self.0)
    }

    /// The first characters, enough to tell nodes apart in human output.
    pub fn short(&self) -> String {
        self.hex()[..8].to_string()
    }
}

impl FromStr for NodeId {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut bytes = [0u8; NODE_ID_BYTES];
        hex::decode_to_slice(s, &mut bytes).map_err(|_| IdError::InvalidNodeId(s.to_string()))?;
        Ok(Self(bytes))
    }
}

impl TryFrom<String> for NodeId {
    type Error = IdError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<NodeId> for String {
    fn from(id: NodeId) -> Self {
        id.hex()
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.hex())
    }
}

impl fmt::Debug for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NodeId({})", self.short())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_hex() {
        let id = NodeId::random();
        assert_eq!(id.hex().len(), 56);
        assert_eq!(id.hex().parse::<NodeId>().unwrap(), id);
        assert_ne!(NodeId::random(), id);
    }

    #[test]
    fn rejects_bad_hex() {
        assert!("abc".parse::<NodeId>().is_err());
        assert!("zz".repeat(28).parse::<NodeId>().is_err());
    }

    #[test]
    fn serializes_as_string() {
        let id = NodeId::random();
        let json = serde_json::to_string(&id).unwrap();
        assert_eq!(json, format!("\"{}\"", id.hex()));
        assert_eq!(serde_json::from_str::<NodeId>(&json).unwrap(), id);
    }

    #[test]
    fn job_ids_read_as_rays() {
        assert_eq!(JobId(1).hex(), "01000000");
        assert_eq!(JobId(258).hex(), "02010000");
        assert_eq!(JobId::parse("02010000"), Some(JobId(258)));
        assert_eq!(JobId::parse("raysubmit_x"), None);
        assert_eq!(JobId::parse("0100"), None);
        assert_eq!(JobId(0).hex_or_empty(), "");
    }
}
