use crate::ApiState;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use oxray_rpc::Token;

/// Cookie that carries the bare token, as Ray's dashboard names it.
pub const TOKEN_COOKIE: &str = "ray-authentication-token";

/// Accepts the token where Ray's server looks for it: `Authorization`, then
/// `X-Ray-Authorization`, then the cookie. Missing is 401, wrong is 403, both plain text.
pub async fn require_token(State(state): State<ApiState>, request: Request, next: Next) -> Response {
    match check(&state.token, request.headers()) {
        Ok(()) => next.run(request).await,
        Err(denied) => denied.into_response(),
    }
}

/// As `require_token`, for routers that carry no `ApiState`.
pub async fn require(State(token): State<Token>, request: Request, next: Next) -> Response {
    match check(&token, request.headers()) {
        Ok(()) => next.run(request).await,
        Err(denied) => denied.into_response(),
    }
}

fn check(token: &Token, headers: &HeaderMap) -> Result<(), (StatusCode, &'static str)> {
    let header_value = [header::AUTHORIZATION.as_str(), "x-ray-authorization"]
        .iter()
        .find_map(|name| headers.get(*name).and_then(|v| v.to_str().ok()));
    let ok = match header_value {
        Some(value) => token.matches_bearer(value),
        None => match cookie(headers, TOKEN_COOKIE) {
            Some(value) => token.matches(value.strip_prefix("Bearer ").unwrap_or(value)),
            None => return Err((StatusCode::UNAUTHORIZED, "Unauthorized: Missing authentication token")),
        },
    };
    if ok {
        Ok(())
    } else {
        Err((StatusCode::FORBIDDEN, "Forbidden: Invalid authentication token"))
    }
}

fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}
