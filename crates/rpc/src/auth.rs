use std::fmt;
use tonic::metadata::MetadataValue;
use tonic::service::Interceptor;
use tonic::{Request, Status};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokenError {
    #[error("the cluster token is empty")]
    Empty,
    #[error("the cluster token may only hold visible ASCII characters")]
    BadCharacters,
}

/// The shared secret every control-plane call and HTTP request must carry.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// 32 random bytes as 64 hex characters.
    pub fn generate() -> Self {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).expect("the operating system has no random source");
        Self(hex::encode(bytes))
    }

    pub fn parse(text: &str) -> Result<Self, TokenError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(TokenError::Empty);
        }
        if !text.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(TokenError::BadCharacters);
        }
        Ok(Self(text.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn bearer(&self) -> String {
        format!("Bearer {}", self.0)
    }

    /// Whether an `Authorization` value names this token. Compares in constant time so the
    /// token cannot be guessed byte by byte from response times.
    pub fn matches_bearer(&self, header: &str) -> bool {
        let Some(given) = header.strip_prefix("Bearer ").or_else(|| header.strip_prefix("bearer ")) else {
            return false;
        };
        self.matches(given.trim())
    }

    pub fn matches(&self, given: &str) -> bool {
        let (a, b) = (self.0.as_bytes(), given.as_bytes());
        if a.len() != b.len() {
            return false;
        }
        a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// Refuses calls without the right token: missing is `Unauthenticated`, wrong is
/// `PermissionDenied`, so clients can tell the user which of the two happened.
#[derive(Clone)]
pub struct ServerAuth(pub Token);

impl Interceptor for ServerAuth {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        match request.metadata().get("authorization").map(|v| v.to_str()) {
            None => Err(Status::unauthenticated("missing cluster token")),
            Some(Ok(value)) if self.0.matches_bearer(value) => Ok(request),
            Some(_) => Err(Status::permission_denied("invalid cluster token")),
        }
    }
}

/// Adds the token to every outgoing call.
#[derive(Clone)]
pub struct ClientAuth(MetadataValue<tonic::metadata::Ascii>);

impl ClientAuth {
    pub fn new(token: &Token) -> Self {
        // A parsed token is visible ASCII, which is always a valid header value.
        Self(token.bearer().parse().expect("token is visible ASCII"))
    }
}

impl Interceptor for ClientAuth {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        request.metadata_mut().insert("authorization", self.0.clone());
        Ok(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_tokens_differ_and_parse() {
        let a = Token::generate();
        assert_eq!(a.as_str().len(), 64);
        assert_ne!(a, Token::generate());
        assert_eq!(Token::parse(&format!(" {}\n", a.as_str())).unwrap(), a);
    }

    #[test]
    fn rejects_empty_and_spaces() {
        assert_eq!(Token::parse("  "), Err(TokenError::Empty));
        assert_eq!(Token::parse("a b"), Err(TokenError::BadCharacters));
    }

    #[test]
    fn matches_only_the_same_bearer() {
        let t = Token::parse("secret").unwrap();
        assert!(t.matches_bearer("Bearer secret"));
        assert!(!t.matches_bearer("Bearer secreT"));
        assert!(!t.matches_bearer("Bearer secret2"));
        assert!(!t.matches_bearer("secret"));
    }

    #[test]
    fn server_interceptor_tells_missing_from_wrong() {
        let token = Token::parse("secret").unwrap();
        let mut auth = ServerAuth(token.clone());
        let err = auth.call(Request::new(())).unwrap_err();
        assert_eq!(err.code(), tonic::Code::Unauthenticated);

        let mut wrong = Request::new(());
        wrong.metadata_mut().insert("authorization", "Bearer nope".parse().unwrap());
        assert_eq!(auth.call(wrong).unwrap_err().code(), tonic::Code::PermissionDenied);

        let good = ClientAuth::new(&token).call(Request::new(())).unwrap();
        assert!(auth.call(good).is_ok());
    }
}
