//! The TLS flags of `oxray start`, and what this program's HTTP clients trust.

use anyhow::{anyhow, Context, Result};
use clap::Args;
use oxray_rpc::tls::{decide, is_loopback, only_this_machine, Files, Mode, Tls, CA_ENV, CERT_ENV, KEY_ENV, MODE_ENV};
use std::path::PathBuf;

#[derive(Args, Debug, Default, Clone)]
pub struct TlsArgs {
    /// This node's certificate (PEM), naming the addresses other machines reach it at. With
    /// --tls-key and --tls-ca it puts every connection between machines, and the dashboard,
    /// on TLS
    #[arg(long, env = CERT_ENV)]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM)
    #[arg(long, env = KEY_ENV)]
    pub tls_key: Option<PathBuf>,
    /// The authority that signed every node's certificate (PEM)
    #[arg(long, env = CA_ENV)]
    pub tls_ca: Option<PathBuf>,
    /// Leave connections between machines unencrypted. Without this flag, or the three
    /// above, a cluster whose head is not on a loopback address uses TLS with an authority
    /// derived from the cluster token; every node and driver must then agree (set
    /// OXRAY_TLS=off for drivers of such a cluster on other machines)
    #[arg(long, conflicts_with_all = ["tls_cert", "tls_key", "tls_ca"])]
    pub no_tls: bool,
}

impl TlsArgs {
    /// The files, made absolute (the processes started with them work elsewhere) and
    /// checked to make a TLS setup; `None` when TLS is off.
    pub fn files(&self) -> Result<Option<Files>> {
        let given = |path: &Option<PathBuf>| path.as_ref().map(|p| p.display().to_string());
        let var = |name: &str| match name {
            CERT_ENV => given(&self.tls_cert),
            KEY_ENV => given(&self.tls_key),
            _ => given(&self.tls_ca),
        };
        let files =
            Files::from_vars(var).map_err(|e| anyhow!("--tls-cert, --tls-key and --tls-ca go together: {e}"))?;
        let Some(files) = files else { return Ok(None) };
        let absolute =
            |path: &PathBuf| std::path::absolute(path).with_context(|| format!("bad path {}", path.display()));
        let files = Files { cert: absolute(&files.cert)?, key: absolute(&files.key)?, ca: absolute(&files.ca)? };
        Tls::load(&files).map_err(|e| anyhow!("{e}"))?;
        Ok(Some(files))
    }

    /// How the node's processes talk to other machines, in a cluster whose head is at
    /// `head`; `recorded` is what this machine's last `start` wrote of its cluster.
    pub fn mode(&self, head: &str, recorded: Option<(&str, &str)>) -> Result<Mode> {
        let asked = if self.no_tls { Some("off".to_string()) } else { std::env::var(MODE_ENV).ok() };
        decide(self.files()?, asked.as_deref(), head, only_this_machine(head), recorded).map_err(anyhow::Error::msg)
    }
}

/// The variables that give the processes a node starts its mode.
pub fn mode_env(mode: &Mode) -> Vec<(&'static str, String)> {
    match mode {
        Mode::Files(files) => files.to_env(),
        other => vec![(MODE_ENV, other.name().to_string())],
    }
}

/// What a head should warn of: a dashboard (the Jobs API, which runs commands) reachable by
/// other machines over plain http, and a control plane reachable by them without TLS.
pub fn exposure_warnings(mode: &Mode, control_host: &str, dashboard_host: &str) -> Vec<String> {
    let mut warnings = Vec::new();
    if !matches!(mode, Mode::Files(_)) && !is_loopback(dashboard_host) {
        warnings.push(format!(
            "the dashboard and Jobs API listen on {dashboard_host} over plain http: the cluster token and every \
             request cross the network in the clear (pass --tls-cert, --tls-key and --tls-ca to serve them over https)"
        ));
    }
    if *mode == Mode::Off && !is_loopback(control_host) {
        warnings.push(format!(
            "the control plane listens on {control_host} without TLS (--no-tls, or a loopback node address): other \
             machines reach it, and connections between machines, in the clear"
        ));
    }
    warnings
}

/// A token typed by hand can be guessed from the certificates of the authority derived from
/// it, offline: one made by oxray (64 hex characters) cannot.
pub fn weak_token_warning(mode: &Mode, token: &str) -> Option<String> {
    (*mode == Mode::Auto && token.len() < 32).then(|| {
        format!(
            "the cluster token has {} characters: TLS's authority comes from it, and a short one can be guessed \
             offline from a certificate; use a long random one (what `oxray start --head` makes when none is given)",
            token.len()
        )
    })
}

/// The cluster's authority (PEM): the one `OXRAY_TLS_CA` names, else that of the cluster
/// started on this machine with TLS.
fn cluster_authority() -> Result<Option<Vec<u8>>> {
    let named = std::env::var(CA_ENV).ok().filter(|v| !v.is_empty());
    let Some(ca) = named.or_else(|| crate::target::read_current().and_then(|c| c.tls_ca)) else { return Ok(None) };
    let pem = std::fs::read(&ca).with_context(|| format!("cannot read the cluster's authority {ca}"))?;
    Ok(Some(pem))
}

/// An HTTP client for the cluster's API, trusting the public roots and the cluster's
/// authority when one is named.
pub fn http_client() -> Result<reqwest::Client> {
    let mut builder = reqwest::Client::builder().connect_timeout(std::time::Duration::from_secs(5));
    if let Some(pem) = cluster_authority()? {
        for cert in reqwest::Certificate::from_pem_bundle(&pem).context("the cluster's authority is no PEM bundle")? {
            builder = builder.add_root_certificate(cert);
        }
    }
    Ok(builder.build()?)
}

/// How WebSockets to the cluster's API trust it: its authority when one is named, else the
/// public roots.
pub fn websocket_connector() -> Result<Option<tokio_tungstenite::Connector>> {
    use rustls::pki_types::{pem::PemObject, CertificateDer};
    let Some(pem) = cluster_authority()? else { return Ok(None) };
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        roots.add(cert.context("the cluster's authority is no PEM bundle")?)?;
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Some(tokio_tungstenite::Connector::Rustls(std::sync::Arc::new(config))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_other_machines_reach_in_the_clear_is_warned_of() {
        let files = Mode::Files(Files { cert: "c".into(), key: "k".into(), ca: "a".into() });
        assert!(exposure_warnings(&Mode::Off, "127.0.0.1", "localhost").is_empty());
        assert!(exposure_warnings(&files, "10.0.0.1", "0.0.0.0").is_empty());
        let both = exposure_warnings(&Mode::Off, "0.0.0.0", "10.0.0.1");
        assert_eq!(both.len(), 2);
        assert!(both[0].contains("dashboard and Jobs API listen on 10.0.0.1"), "{both:?}");
        assert!(both[1].contains("control plane listens on 0.0.0.0 without TLS"), "{both:?}");
        assert_eq!(exposure_warnings(&Mode::Off, "0.0.0.0", "[::1]").len(), 1, "the dashboard on loopback");
        let auto = exposure_warnings(&Mode::Auto, "0.0.0.0", "0.0.0.0");
        assert_eq!(auto.len(), 1, "the token's authority is no browser's: the dashboard stays http");
    }

    #[test]
    fn a_short_token_is_warned_of_when_tls_comes_from_it() {
        assert!(weak_token_warning(&Mode::Auto, "secret").is_some_and(|w| w.contains("6 characters")));
        assert!(weak_token_warning(&Mode::Auto, &"a".repeat(64)).is_none());
        assert!(weak_token_warning(&Mode::Off, "secret").is_none());
    }

    #[test]
    fn no_tls_turns_off_what_would_be_on_and_does_not_go_with_files() {
        let off = TlsArgs { no_tls: true, ..Default::default() };
        assert_eq!(off.mode("10.0.0.1:6379", None).unwrap(), Mode::Off);
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            tls: TlsArgs,
        }
        let both = Cli::try_parse_from(["x", "--no-tls", "--tls-ca", "a.crt"]).err().unwrap().to_string();
        assert!(both.contains("cannot be used with"), "{both}");
    }

    #[test]
    fn tls_flags_go_together_and_must_be_readable() {
        let some = TlsArgs { tls_cert: Some("/c".into()), ..Default::default() };
        let err = some.files().unwrap_err().to_string();
        assert!(err.contains("go together") && err.contains("OXRAY_TLS_KEY, OXRAY_TLS_CA not set"), "{err}");
        let unreadable = TlsArgs {
            tls_cert: Some("/nope.crt".into()),
            tls_key: Some("k".into()),
            tls_ca: Some("a".into()),
            ..Default::default()
        };
        let err = unreadable.files().unwrap_err().to_string();
        assert!(err.contains("/nope.crt"), "{err}");
        assert!(TlsArgs::default().files().unwrap().is_none());
    }
}
