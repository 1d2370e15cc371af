use super::*;
use crate::tls::testing::{handshake, ping, tcp_pair};
use crate::tls::{Carries, Tls};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn process(token: &Token) -> Tls {
    Tls::build(material(token).unwrap()).unwrap()
}

#[test]
fn one_token_makes_one_authority_everywhere_and_another_token_another() {
    let token = Token::generate();
    let made = |t: &Token| authority(&authority_key(t).unwrap()).unwrap().der().to_vec();
    assert_eq!(made(&token), made(&token), "the same bytes in every process");
    assert_ne!(made(&token), made(&Token::generate()));
}

#[tokio::test]
async fn processes_of_one_token_talk_whatever_name_they_dialed() {
    let token = Token::generate();
    let (server, client) = (process(&token), process(&token));
    assert!(server.http_server().is_none(), "the dashboard stays http: no browser knows this authority");
    for host in ["10.0.0.9", "raycluster-head-svc.default.svc.cluster.local"] {
        let (dialed, accepted) = handshake(&server, &client, host, Carries::Tasks).await;
        ping(&mut dialed.unwrap(), &mut accepted.unwrap()).await;
    }
}

#[tokio::test]
async fn a_client_with_no_certificate_of_the_authority_is_refused_by_the_server() {
    let token = Token::generate();
    let server = process(&token);
    // It trusts the server, but shows no certificate of its own.
    let mut roots = rustls::RootCertStore::empty();
    roots.add(authority(&authority_key(&token).unwrap()).unwrap().der().clone()).unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let (dialed, accepted) = tcp_pair().await;
    let name = rustls::pki_types::ServerName::try_from(CLUSTER_NAME).unwrap();
    let (dialed, accepted) = tokio::join!(
        async {
            let mut stream = connector.connect(name, dialed).await?;
            stream.write_all(b"ping").await?;
            stream.flush().await?;
            let mut got = [0u8; 1];
            stream.read_exact(&mut got).await.map(|_| ())
        },
        server.accept(accepted)
    );
    let refused = accepted.err().expect("the server refuses a client without a certificate").to_string();
    assert!(refused.contains("certificate"), "{refused}");
    assert!(dialed.is_err());
}

#[tokio::test]
async fn a_process_of_another_token_is_refused_both_ways() {
    let (ours, theirs) = (process(&Token::generate()), process(&Token::generate()));
    for (server, client) in [(&ours, &theirs), (&theirs, &ours)] {
        let (dialed, accepted) = tcp_pair().await;
        let (dialed, accepted) =
            tokio::join!(client.connect("10.0.0.9", Carries::Grpc, dialed), server.accept(accepted));
        assert!(dialed.is_err() && accepted.is_err());
    }
}
