//! The bytes exchanged with replicas, which are Python actors: a call's arguments are a
//! pickled `(args, kwargs)` pair, a reply a pickled value. Only plain values cross (bytes,
//! str, int, float, lists, tuples), so the pickle format of the standard library is all
//! this needs.

use serde_pickle::{DeOptions, HashableValue, SerOptions, Value};
use std::collections::BTreeMap;

/// The class every replica runs, and how a worker recognises a creation call that names a
/// class by its import path (rather than carrying a pickled one).
pub const REPLICA_CLASS: &str = "oxray.serve._replica:Replica";
pub const REPLICA_METHODS: &[&str] = &[
    "__serve_ready__",
    "__serve_health__",
    "__serve_reconfigure__",
    "__serve_stop__",
    "__serve_http__",
    "handle_request",
];
/// What imports a declarative application and answers its deploy body.
pub const BUILDER_CLASS: &str = "oxray.serve._declarative:ApplicationBuilder";
pub const BUILDER_METHODS: &[&str] = &["build"];
pub const BLUEPRINT_MAGIC: &[u8] = b"OXRAYCLS";

/// A creation call's function: the class by import path and its actor options as JSON.
pub fn blueprint(class: &str, options: &serde_json::Value) -> Vec<u8> {
    let mut out = BLUEPRINT_MAGIC.to_vec();
    out.extend_from_slice(serde_json::json!({"class": class, "options": options}).to_string().as_bytes());
    out
}

pub enum Arg {
    Str(String),
    Bytes(Vec<u8>),
    Float(f64),
    Pairs(Vec<(Vec<u8>, Vec<u8>)>),
}

fn value(arg: Arg) -> Value {
    match arg {
        Arg::Str(s) => Value::String(s),
        Arg::Bytes(b) => Value::Bytes(b),
        Arg::Float(f) => Value::F64(f),
        Arg::Pairs(pairs) => {
            Value::List(pairs.into_iter().map(|(k, v)| Value::Tuple(vec![Value::Bytes(k), Value::Bytes(v)])).collect())
        }
    }
}

/// A call's arguments: `(args, {})`.
pub fn args(args: Vec<Arg>) -> Vec<u8> {
    let payload = Value::Tuple(vec![
        Value::Tuple(args.into_iter().map(value).collect()),
        Value::Dict(BTreeMap::<HashableValue, Value>::new()),
    ]);
    serde_pickle::value_to_vec(&payload, SerOptions::new()).expect("plain values always pickle")
}

fn load(data: &[u8]) -> Result<Value, String> {
    serde_pickle::value_from_slice(data, DeOptions::new()).map_err(|e| format!("unreadable reply from a replica: {e}"))
}

/// A control method's reply: a JSON document in a str.
pub fn json_reply(data: &[u8]) -> Result<serde_json::Value, String> {
    match load(data)? {
        Value::String(text) => serde_json::from_str(&text).map_err(|e| format!("a replica's reply is not JSON: {e}")),
        other => Err(format!("a replica replied {other:?} where a JSON text was expected")),
    }
}

#[derive(Debug, PartialEq)]
pub struct HttpReply {
    pub status: u16,
    pub headers: Vec<(Vec<u8>, Vec<u8>)>,
    pub body: Vec<u8>,
}

fn bytes(v: Value) -> Option<Vec<u8>> {
    match v {
        Value::Bytes(b) => Some(b),
        Value::String(s) => Some(s.into_bytes()),
        _ => None,
    }
}

/// The first item of `__serve_http_stream__`: `(status, [(name, value), ...], body)` for a
/// response that is whole (`true`), or `(status, [(name, value), ...])` for one whose body
/// comes in the items after it.
pub fn http_start(data: &[u8]) -> Result<(HttpReply, bool), String> {
    let bad = || "a replica's HTTP reply does not begin with (status, headers[, body])".to_string();
    let Value::Tuple(mut parts) = load(data)? else { return Err(bad()) };
    let whole = match parts.len() {
        2 => false,
        3 => true,
        _ => return Err(bad()),
    };
    let body = if whole { bytes(parts.pop().expect("three")).ok_or_else(bad)? } else { Vec::new() };
    head(parts, body).map(|reply| (reply, whole)).ok_or_else(bad)
}

/// A later item of `__serve_http_stream__`: a piece of the body.
pub fn body_chunk(data: &[u8]) -> Result<Vec<u8>, String> {
    bytes(load(data)?).ok_or_else(|| "a replica sent a body piece that is not bytes".to_string())
}

fn head(mut parts: Vec<Value>, body: Vec<u8>) -> Option<HttpReply> {
    let headers = match parts.pop()? {
        Value::List(items) | Value::Tuple(items) => items
            .into_iter()
            .map(|pair| match pair {
                Value::Tuple(mut kv) | Value::List(mut kv) if kv.len() == 2 => {
                    let v = bytes(kv.pop().expect("two"))?;
                    let k = bytes(kv.pop().expect("two"))?;
                    Some((k, v))
                }
                _ => None,
            })
            .collect::<Option<Vec<_>>>()?,
        _ => return None,
    };
    let status = match parts.pop()? {
        Value::I64(code) => u16::try_from(code).ok()?,
        _ => return None,
    };
    Some(HttpReply { status, headers, body })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_an_args_kwargs_pair() {
        let data = args(vec![Arg::Str("GET".into()), Arg::Bytes(b"q=1".to_vec()), Arg::Float(2.5)]);
        let Value::Tuple(pair) = serde_pickle::value_from_slice(&data, DeOptions::new()).unwrap() else { panic!() };
        assert_eq!(
            pair[0],
            Value::Tuple(vec![Value::String("GET".into()), Value::Bytes(b"q=1".to_vec()), Value::F64(2.5)])
        );
        assert_eq!(pair[1], Value::Dict(BTreeMap::new()));
    }

    #[test]
    fn reads_whole_replies_heads_and_chunks_and_refuses_other_shapes() {
        let headers = Value::List(vec![Value::Tuple(vec![
            Value::Bytes(b"content-type".to_vec()),
            Value::Bytes(b"text/plain".to_vec()),
        ])]);
        let whole = Value::Tuple(vec![Value::I64(201), headers.clone(), Value::Bytes(b"hi".to_vec())]);
        let (read, is_whole) = http_start(&serde_pickle::value_to_vec(&whole, SerOptions::new()).unwrap()).unwrap();
        assert!(is_whole);
        assert_eq!(read.status, 201);
        assert_eq!(read.headers, vec![(b"content-type".to_vec(), b"text/plain".to_vec())]);
        assert_eq!(read.body, b"hi");
        let head =
            serde_pickle::value_to_vec(&Value::Tuple(vec![Value::I64(200), headers]), SerOptions::new()).unwrap();
        let (read, is_whole) = http_start(&head).unwrap();
        assert!(!is_whole && read.status == 200 && read.body.is_empty());
        let chunk = serde_pickle::value_to_vec(&Value::Bytes(b"tok".to_vec()), SerOptions::new()).unwrap();
        assert_eq!(body_chunk(&chunk).unwrap(), b"tok");
        assert!(http_start(&chunk).is_err());
        assert!(body_chunk(&head).is_err());
        let four = Value::Tuple(vec![Value::I64(200), Value::List(vec![]), Value::Bytes(vec![]), Value::I64(1)]);
        assert!(http_start(&serde_pickle::value_to_vec(&four, SerOptions::new()).unwrap()).is_err());
        assert!(http_start(b"garbage").is_err());
    }

    #[test]
    fn reads_json_replies() {
        let data = serde_pickle::value_to_vec(&Value::String("{\"ok\": true}".into()), SerOptions::new()).unwrap();
        assert_eq!(json_reply(&data).unwrap()["ok"], true);
    }

    #[test]
    fn a_blueprint_names_the_replica_class() {
        let b = blueprint(REPLICA_CLASS, &serde_json::json!({"name": "x"}));
        assert!(b.starts_with(BLUEPRINT_MAGIC));
        let doc: serde_json::Value = serde_json::from_slice(&b[BLUEPRINT_MAGIC.len()..]).unwrap();
        assert_eq!(doc["class"], REPLICA_CLASS);
        assert_eq!(doc["options"]["name"], "x");
    }
}
