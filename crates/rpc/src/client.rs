use crate::auth::{ClientAuth, Token};
use oxray_proto::v1::agent_service_client::AgentServiceClient;
use oxray_proto::v1::head_service_client::HeadServiceClient;
use oxray_proto::v1::lease_service_client::LeaseServiceClient;
use oxray_proto::v1::object_service_client::ObjectServiceClient;
use std::time::Duration;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};

pub type HeadClient = HeadServiceClient<InterceptedService<Channel, ClientAuth>>;
pub type AgentClient = AgentServiceClient<InterceptedService<Channel, ClientAuth>>;
pub type LeaseClient = LeaseServiceClient<InterceptedService<Channel, ClientAuth>>;
pub type ObjectClient = ObjectServiceClient<InterceptedService<Channel, ClientAuth>>;

#[derive(Debug, thiserror::Error)]
pub enum RpcError {
    #[error("invalid head address {0:?}: expected HOST:PORT")]
    BadAddress(String),
    #[error("cannot reach the head at {address}: {reason}")]
    Unreachable { address: String, reason: String },
}

fn endpoint(address: &str, call_timeout: Duration) -> Result<Endpoint, RpcError> {
    let bad = || RpcError::BadAddress(address.to_string());
    let hostport = address.strip_prefix("http://").unwrap_or(address);
    let (host, port) = hostport.rsplit_once(':').ok_or_else(bad)?;
    if host.is_empty() || port.parse::<u16>().map_or(true, |p| p == 0) {
        return Err(bad());
    }
    Ok(Endpoint::from_shared(format!("http://{hostport}"))
        .map_err(|_| bad())?
        .connect_timeout(Duration::from_secs(3))
        .timeout(call_timeout))
}

/// A head's endpoint: pings find a head gone without a word (its machine lost, a partition),
/// so long-lived streams (a driver's job, node changes) end and are opened again.
fn head_endpoint(address: &str, call_timeout: Duration) -> Result<Endpoint, RpcError> {
    Ok(endpoint(address, call_timeout)?
        .http2_keep_alive_interval(HEAD_KEEPALIVE_INTERVAL)
        .keep_alive_timeout(HEAD_KEEPALIVE_TIMEOUT)
        .keep_alive_while_idle(true))
}

const HEAD_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
const HEAD_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// Connects now, so an unreachable head is reported at once.
pub async fn connect_head(address: &str, token: &Token, call_timeout: Duration) -> Result<HeadClient, RpcError> {
    crate::tls::init(token, address)
        .map_err(|reason| RpcError::Unreachable { address: address.to_string(), reason })?;
    let channel = crate::local::connect(head_endpoint(address, call_timeout)?)
        .await
        .map_err(|e| RpcError::Unreachable { address: address.to_string(), reason: hinted(root_cause(&e)) })?;
    Ok(HeadServiceClient::with_interceptor(channel, ClientAuth::new(token)))
}

/// Connects on first use and reconnects by itself after the head goes away and comes back.
pub fn connect_head_lazy(address: &str, token: &Token, call_timeout: Duration) -> Result<HeadClient, RpcError> {
    crate::tls::init(token, address)
        .map_err(|reason| RpcError::Unreachable { address: address.to_string(), reason })?;
    let channel = crate::local::connect_lazy(head_endpoint(address, call_timeout)?);
    Ok(HeadServiceClient::with_interceptor(channel, ClientAuth::new(token)))
}

/// A node agent's service, connected on first use.
pub fn connect_agent_lazy(address: &str, token: &Token, call_timeout: Duration) -> Result<AgentClient, RpcError> {
    let channel = crate::local::connect_lazy(endpoint(address, call_timeout)?);
    Ok(AgentServiceClient::with_interceptor(channel, ClientAuth::new(token)))
}

/// A process's object server, connected on first use.
pub fn connect_objects_lazy(address: &str, token: &Token, call_timeout: Duration) -> Result<ObjectClient, RpcError> {
    let channel = crate::local::connect_lazy(endpoint(address, call_timeout)?);
    Ok(ObjectServiceClient::with_interceptor(channel, ClientAuth::new(token)))
}

/// A one-line explanation of a failed call, naming the likely fix.
pub fn explain(address: &str, status: &Status) -> String {
    match status.code() {
        Code::Unauthenticated => format!(
            "the head at {address} requires the cluster token: pass --token, set \
             OXRAY_AUTH_TOKEN, or copy the head's token file (`oxray get-auth-token` on the head)"
        ),
        Code::PermissionDenied => format!(
            "the head at {address} refused the cluster token: it does not match the head's \
             (`oxray get-auth-token` on the head prints the right one)"
        ),
        // A plain connection to a head on TLS reaches only what it serves Ray's tools.
        Code::Unimplemented if crate::tls::current().is_none() => format!(
            "the head at {address} does not serve oxray's calls over a plain connection: it uses TLS (or runs \
             another oxray release), so this process must too: set OXRAY_TLS=auto (a head reached at a loopback \
             address, through a port-forward say, needs it), or give the cluster's OXRAY_TLS_CERT, OXRAY_TLS_KEY \
             and OXRAY_TLS_CA"
        ),
        Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled => {
            let cause = std::error::Error::source(status).map(root_cause);
            let reason = cause.unwrap_or_else(|| status.message().to_string());
            format!("cannot reach the head at {address}: {}", hinted(reason))
        }
        // The connection was made, then broke before an answer: the head speaks TLS to a
        // client that does not, or the other way round.
        _ if std::error::Error::source(status).is_some() => {
            let cause = std::error::Error::source(status).map(root_cause).unwrap_or_default();
            let hint = match crate::tls::current() {
                Some(_) => {
                    "; does the head use TLS with the same authority (the same token, or the same \
                     --tls-ca), or was it started with --no-tls (then set OXRAY_TLS=off here)?"
                }
                None => {
                    "; if the head uses TLS, leave OXRAY_TLS unset (or, for a cluster started with certificate \
                     files, set OXRAY_TLS_CERT, OXRAY_TLS_KEY and OXRAY_TLS_CA to this machine's certificate, \
                     its key and the cluster's authority)"
                }
            };
            format!("cannot talk to the head at {address}: {cause}{hint}")
        }
        _ => format!("the head at {address} answered: {}", status.message()),
    }
}

/// Why a head could not be reached, with what a failed handshake most likely means.
fn hinted(reason: String) -> String {
    if reason.contains("peer certificate") {
        format!(
            "{reason}; its certificate is not of this cluster's authority: is this the head's token (or its --tls-ca)?"
        )
    } else if crate::tls::current().is_some()
        && (reason.contains("corrupt message") || reason.contains("handshake eof"))
    {
        format!(
            "{reason}; the head does not seem to speak TLS: if it was started with --no-tls, set OXRAY_TLS=off here"
        )
    } else {
        reason
    }
}

/// The innermost error of a chain: the one that names what actually went wrong.
pub fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = error;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_malformed_addresses() {
        for bad in ["", "host", ":6379", "host:", "host:0", "host:99999", "host:port"] {
            assert!(endpoint(bad, Duration::from_secs(1)).is_err(), "{bad}");
        }
        assert!(endpoint("10.0.0.1:6379", Duration::from_secs(1)).is_ok());
        assert!(endpoint("http://head:6379", Duration::from_secs(1)).is_ok());
    }

    #[tokio::test]
    async fn unreachable_head_is_reported() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        drop(listener);
        let err = connect_head(&address, &Token::generate(), Duration::from_secs(1)).await.unwrap_err();
        assert!(err.to_string().contains("cannot reach the head"), "{err}");
    }
}
