//! Which cluster a client command talks to, and with which token.

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use oxray_config::paths;
use oxray_rpc::{connect_head, HeadClient, Token};
use std::time::Duration;

#[derive(Args, Debug, Clone)]
pub struct TargetArgs {
    /// The head's control-plane address HOST:PORT [default: the cluster started on this machine]
    #[arg(long, env = "OXRAY_ADDRESS")]
    pub address: Option<String>,
    /// The cluster token [default: $OXRAY_AUTH_TOKEN, else the token file]
    #[arg(long, env = "OXRAY_AUTH_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

pub use oxray_config::current::{read_current, CurrentCluster};

/// The token: explicit, else that of the private cluster (one `init()` started) serving
/// `address` on this machine, else the user's token file.
pub fn resolve_token(explicit: Option<&str>, address: &str) -> Result<Token> {
    if let Some(text) = explicit {
        return Token::parse(text).context("invalid cluster token");
    }
    if let Some(text) = oxray_config::private_clusters::token_for(address) {
        return Token::parse(&text).context("invalid cluster token of a private cluster");
    }
    let home = paths::oxray_home();
    match paths::read_token(&home).context("cannot read the token file")? {
        Some((text, file)) => {
            Token::parse(&text).with_context(|| format!("invalid cluster token in {}", file.display()))
        }
        None => bail!(
            "no cluster token: pass --token, set OXRAY_AUTH_TOKEN (or Ray's RAY_AUTH_TOKEN) to what \
             `ray get-auth-token` prints on the head, or save it to {}",
            paths::token_file(&home).display()
        ),
    }
}

impl TargetArgs {
    pub fn address(&self) -> Result<String> {
        match self.address.as_deref() {
            Some(a) if !a.is_empty() && a != "auto" => Ok(a.trim_start_matches("http://").to_string()),
            _ => read_current().map(|c| c.address).ok_or_else(|| {
                anyhow!(
                    "no cluster to talk to: pass --address HOST:PORT, set OXRAY_ADDRESS, or start one on this \
                     machine with `oxray start --head`"
                )
            }),
        }
    }

    pub async fn connect(&self) -> Result<(String, HeadClient)> {
        let address = self.address()?;
        let token = resolve_token(self.token.as_deref(), &address)?;
        let client = connect_head(&address, &token, Duration::from_secs(10)).await?;
        Ok((address, client))
    }
}

/// Fetches every node, with failures explained in one line.
pub async fn fetch_nodes((address, client): &mut (String, HeadClient)) -> Result<Vec<oxray_types::NodeInfo>> {
    let reply = client
        .list_nodes(oxray_proto::v1::ListNodesRequest {})
        .await
        .map_err(|status| anyhow!(oxray_rpc::explain(address, &status)))?;
    reply
        .into_inner()
        .nodes
        .into_iter()
        .map(|n| oxray_types::NodeInfo::try_from(n).context("the head sent a malformed node"))
        .collect()
}

/// Work waiting for resources, as the head lists it.
pub async fn fetch_pending((address, client): &mut (String, HeadClient)) -> Result<Vec<String>> {
    let reply = client
        .get_cluster_info(oxray_proto::v1::GetClusterInfoRequest {})
        .await
        .map_err(|status| anyhow!(oxray_rpc::explain(address, &status)))?;
    Ok(reply.into_inner().pending_demands)
}

/// A small runtime for client commands: they make a handful of calls and exit.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread().enable_all().build().context("cannot start the async runtime")
}
