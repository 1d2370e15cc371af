//! The channels this process's clients use: connected on first use, authenticated with the
//! cluster token.

use oxray_rpc::ClientAuth;
use std::time::Duration;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

pub(crate) type Authed = InterceptedService<Channel, ClientAuth>;

pub(crate) fn channel(address: &str) -> Result<Channel, String> {
    let endpoint = Endpoint::from_shared(format!("http://{address}")).map_err(|e| e.to_string())?;
    Ok(oxray_rpc::connect_lazy(endpoint.connect_timeout(Duration::from_secs(5))))
}
