//! The OpenAPI 3 document of the dashboard port, built with its routes: a route is added
//! together with its description, so no route goes undescribed and no description outlives
//! its route.

use axum::handler::Handler;
use axum::routing::{on, MethodFilter};
use axum::Router;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

/// What one operation takes and answers.
#[derive(Debug, Clone)]
pub struct Op {
    tag: &'static str,
    summary: &'static str,
    path: Vec<(&'static str, Value)>,
    query: Vec<Value>,
    body: Option<(&'static str, Value)>,
    answers: Vec<(u16, &'static str)>,
}

/// An operation of `tag`, which `summary` describes.
pub fn op(tag: &'static str, summary: &'static str) -> Op {
    Op { tag, summary, path: Vec::new(), query: Vec::new(), body: None, answers: Vec::new() }
}

impl Op {
    /// The schemas of path parameters that are not any string, as `(name, JSON Schema)`.
    pub fn path(mut self, params: &[(&'static str, Value)]) -> Self {
        self.path.extend(params.iter().cloned());
        self
    }

    /// Query parameters, as `(name, JSON Schema, description)`.
    pub fn query(mut self, params: &[(&'static str, Value, &'static str)]) -> Self {
        self.query.extend(params.iter().map(|(name, schema, description)| {
            json!({ "name": name, "in": "query", "required": false, "schema": schema, "description": description })
        }));
        self
    }

    /// A request body of `content_type`, as `schema` describes it.
    pub fn body(mut self, content_type: &'static str, schema: Value) -> Self {
        self.body = Some((content_type, schema));
        self
    }

    /// An answer other than 200, with what it means.
    pub fn answers(mut self, status: u16, meaning: &'static str) -> Self {
        self.answers.push((status, meaning));
        self
    }

    fn to_json(&self, path: &str, token: bool) -> Value {
        let schema_of = |name: &str| self.path.iter().find(|(n, _)| *n == name).map(|(_, s)| s.clone());
        let mut params: Vec<Value> = path_params(path)
            .map(|name| {
                let schema = schema_of(name).unwrap_or_else(schema::string);
                json!({ "name": name, "in": "path", "required": true, "schema": schema })
            })
            .collect();
        params.extend(self.query.iter().cloned());
        let mut responses = Map::new();
        responses.insert("200".into(), json!({ "description": "OK" }));
        // What the request names may be malformed: a query, a path, a body.
        if !params.is_empty() || self.body.is_some() {
            responses.insert("400".into(), json!({ "description": "a malformed request" }));
        }
        for (status, meaning) in &self.answers {
            responses.insert(status.to_string(), json!({ "description": meaning }));
        }
        if token {
            responses.insert("401".into(), json!({ "description": "the cluster token is missing or wrong" }));
        }
        let mut operation = json!({ "tags": [self.tag], "summary": self.summary, "responses": responses });
        if !params.is_empty() {
            operation["parameters"] = Value::Array(params);
        }
        if let Some((content_type, schema)) = &self.body {
            operation["requestBody"] = json!({ "required": true, "content": { *content_type: { "schema": schema } } });
        }
        if token {
            operation["security"] = json!([{ "token": [] }]);
        }
        operation
    }
}

/// The `{name}` segments of a route.
fn path_params(path: &str) -> impl Iterator<Item = &str> {
    path.split('/').filter_map(|s| s.strip_prefix('{')?.strip_suffix('}'))
}

/// Operations by path, then by method (lower case, as OpenAPI names them).
#[derive(Debug, Clone, Default)]
pub struct Paths(BTreeMap<String, Map<String, Value>>);

impl Paths {
    fn add(&mut self, path: &str, method: &str, operation: Value) {
        let previous = self.0.entry(path.to_string()).or_default().insert(method.to_string(), operation);
        assert!(previous.is_none(), "{method} {path} is described twice");
    }

    pub fn merge(&mut self, other: Paths) {
        for (path, methods) in other.0 {
            for (method, operation) in methods {
                self.add(&path, &method, operation);
            }
        }
    }

    /// `(method, path)` of every operation, upper case methods.
    pub fn operations(&self) -> Vec<(String, String)> {
        let each = |(path, methods): (&String, &Map<String, Value>)| {
            methods.keys().map(|m| (m.to_uppercase(), path.clone())).collect::<Vec<_>>()
        };
        self.0.iter().flat_map(each).collect()
    }
}

/// A router whose routes are described as they are added.
pub struct Documented<S = ()> {
    router: Router<S>,
    paths: Paths,
    /// Whether its routes need the cluster token.
    token: bool,
}

impl<S: Clone + Send + Sync + 'static> Documented<S> {
    pub fn new(token: bool) -> Self {
        Self { router: Router::new(), paths: Paths::default(), token }
    }

    pub fn get<H: Handler<T, S>, T: 'static>(self, path: &str, op: Op, handler: H) -> Self {
        self.at(MethodFilter::GET, "get", path, op, handler)
    }

    pub fn post<H: Handler<T, S>, T: 'static>(self, path: &str, op: Op, handler: H) -> Self {
        self.at(MethodFilter::POST, "post", path, op, handler)
    }

    pub fn put<H: Handler<T, S>, T: 'static>(self, path: &str, op: Op, handler: H) -> Self {
        self.at(MethodFilter::PUT, "put", path, op, handler)
    }

    pub fn delete<H: Handler<T, S>, T: 'static>(self, path: &str, op: Op, handler: H) -> Self {
        self.at(MethodFilter::DELETE, "delete", path, op, handler)
    }

    fn at<H: Handler<T, S>, T: 'static>(
        mut self,
        filter: MethodFilter,
        method: &str,
        path: &str,
        op: Op,
        handler: H,
    ) -> Self {
        self.paths.add(path, method, op.to_json(path, self.token));
        self.router = self.router.route(path, on(filter, handler));
        self
    }

    /// The router with `f` applied (layers, a fallback), and the description. No route can be
    /// added after: a layer covers only the routes added before it.
    pub fn finish(self, f: impl FnOnce(Router<S>) -> Router<S>) -> (Router<S>, Paths) {
        (f(self.router), self.paths)
    }

    pub fn with_state<S2>(self, state: S) -> Documented<S2> {
        Documented { router: self.router.with_state(state), paths: self.paths, token: self.token }
    }

    pub fn into_parts(self) -> (Router<S>, Paths) {
        (self.router, self.paths)
    }
}

/// The whole document.
pub fn document(paths: &Paths) -> Value {
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": "oxray",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "The HTTP API of an oxray head on its dashboard port: Ray's Jobs, state and Serve \
                APIs, cluster status, metrics and the dashboard's own reads.",
        },
        "paths": paths.0,
        "components": { "securitySchemes": { "token": { "type": "http", "scheme": "bearer" } } },
    })
}

/// JSON Schemas the descriptions share.
pub mod schema {
    use serde_json::{json, Value};

    pub fn string() -> Value {
        json!({ "type": "string" })
    }

    pub fn integer() -> Value {
        json!({ "type": "integer" })
    }

    pub fn number() -> Value {
        json!({ "type": "number" })
    }

    pub fn boolean() -> Value {
        json!({ "type": "boolean" })
    }

    pub fn object() -> Value {
        json!({ "type": "object" })
    }

    pub fn bytes() -> Value {
        json!({ "type": "string", "format": "binary" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn ok() -> &'static str {
        "ok"
    }

    #[test]
    fn each_route_is_described_with_its_path_parameters_and_token() {
        let api = Documented::<()>::new(true)
            .get("/a/{id}", op("t", "read").query(&[("limit", schema::integer(), "how many")]), ok)
            .delete("/a/{id}", op("t", "remove").answers(404, "no such thing"), ok);
        let (_, paths) = api.into_parts();
        assert_eq!(paths.operations(), vec![("DELETE".into(), "/a/{id}".into()), ("GET".into(), "/a/{id}".into())]);
        let doc = document(&paths);
        let get = &doc["paths"]["/a/{id}"]["get"];
        let names: Vec<&str> =
            get["parameters"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["id", "limit"]);
        assert_eq!(get["security"], json!([{ "token": [] }]));
        assert!(doc["paths"]["/a/{id}"]["delete"]["responses"]["404"].is_object());
        let public = Documented::<()>::new(false).get("/b", op("t", "b"), ok).into_parts().1;
        assert!(document(&public)["paths"]["/b"]["get"].get("security").is_none());
    }

    #[test]
    #[should_panic(expected = "described twice")]
    fn a_route_added_twice_is_a_mistake_found_at_once() {
        let _ = Documented::<()>::new(false).get("/b", op("t", "b"), ok).get("/b", op("t", "b"), ok);
    }
}
