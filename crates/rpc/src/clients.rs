//! Clients of other processes kept by address, made on first use: what the service traits'
//! real implementations share.

use crate::auth::{ClientAuth, Token};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tonic::transport::{Channel, Endpoint};
use tonic::Status;

pub(crate) struct Clients<C> {
    token: Token,
    connect_timeout: Duration,
    /// `None`: calls wait as long as the other side takes.
    call_timeout: Option<Duration>,
    /// Most clients kept: past it they are all dropped (addresses that come and go, such
    /// as drivers', do not pile up).
    kept: usize,
    make: fn(Channel, ClientAuth) -> C,
    clients: Mutex<HashMap<String, C>>,
}

impl<C: Clone> Clients<C> {
    pub fn new(
        token: Token,
        connect_timeout: Duration,
        call_timeout: Option<Duration>,
        kept: usize,
        make: fn(Channel, ClientAuth) -> C,
    ) -> Self {
        Self { token, connect_timeout, call_timeout, kept, make, clients: Mutex::new(HashMap::new()) }
    }

    pub fn get(&self, address: &str) -> Result<C, Status> {
        let mut clients = self.clients.lock().expect("clients lock");
        if let Some(client) = clients.get(address) {
            return Ok(client.clone());
        }
        let endpoint = Endpoint::from_shared(format!("http://{address}"))
            .map_err(|_| Status::invalid_argument(format!("{address:?} is not an address")))?
            .connect_timeout(self.connect_timeout);
        let endpoint = match self.call_timeout {
            Some(limit) => endpoint.timeout(limit),
            None => endpoint,
        };
        let client = (self.make)(crate::local::connect_lazy(endpoint), ClientAuth::new(&self.token));
        if clients.len() >= self.kept {
            clients.clear();
        }
        clients.insert(address.to_string(), client.clone());
        Ok(client)
    }

    /// Forgets the client of `address` (its process went): the next call connects anew.
    pub fn forget(&self, address: &str) {
        self.clients.lock().expect("clients lock").remove(address);
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.clients.lock().expect("clients lock").len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clients(kept: usize) -> Clients<Channel> {
        Clients::new(Token::generate(), Duration::from_secs(1), Some(Duration::from_secs(1)), kept, |channel, _| {
            channel
        })
    }

    #[tokio::test]
    async fn one_client_per_address_is_kept_up_to_the_limit() {
        let c = clients(2);
        c.get("127.0.0.1:1").unwrap();
        c.get("127.0.0.1:1").unwrap();
        c.get("127.0.0.1:2").unwrap();
        assert_eq!(c.len(), 2);
        c.get("127.0.0.1:3").unwrap();
        assert_eq!(c.len(), 1, "past the limit the old ones go");
        c.forget("127.0.0.1:3");
        assert_eq!(c.len(), 0);
    }

    #[tokio::test]
    async fn a_malformed_address_is_an_invalid_argument() {
        assert_eq!(clients(2).get("bad address").unwrap_err().code(), tonic::Code::InvalidArgument);
    }
}
