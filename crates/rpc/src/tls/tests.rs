use super::*;
use crate::frames::{self, Receiver, Sender};
use crate::socket::Socket;
use crate::stream::Stream;
use oxray_proto::v1::DataChunk;
use std::path::Path;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A certificate authority that signs certificates for names.
struct Authority {
    cert: rcgen::Certificate,
    key: rcgen::KeyPair,
}

impl Authority {
    fn new() -> Self {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let key = rcgen::KeyPair::generate().unwrap();
        Self { cert: params.self_signed(&key).unwrap(), key }
    }

    /// A node's files in `dir`: its certificate for `name`, its key, and this authority.
    fn node(&self, dir: &Path, name: &str) -> Files {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![name.to_string()])
            .unwrap()
            .signed_by(&key, &self.cert, &self.key)
            .unwrap();
        let files = Files { cert: dir.join("node.crt"), key: dir.join("node.key"), ca: dir.join("ca.crt") };
        std::fs::write(&files.cert, cert.pem()).unwrap();
        std::fs::write(&files.key, key.serialize_pem()).unwrap();
        std::fs::write(&files.ca, self.cert.pem()).unwrap();
        files
    }
}

fn node(authority: &Authority, name: &str) -> (tempfile::TempDir, Tls) {
    let dir = tempfile::tempdir().unwrap();
    let tls = Tls::load(&authority.node(dir.path(), name)).unwrap();
    (dir, tls)
}

/// Two ends of a TCP connection on loopback.
async fn tcp_pair() -> (SocketStream, SocketStream) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dialing = tokio::net::TcpStream::connect(listener.local_addr().unwrap());
    let (dialed, accepted) = tokio::join!(dialing, listener.accept());
    let wrap = |s| SocketStream::new(Socket::from_tokio_tcp(s).unwrap());
    (wrap(dialed.unwrap()), wrap(accepted.unwrap().0))
}

/// Both sides of a handshake: the client dialing `host` for `carries`.
async fn handshake(
    server: &Tls,
    client: &Tls,
    host: &str,
    carries: Carries,
) -> (io::Result<TlsStream<SocketStream>>, io::Result<TlsStream<SocketStream>>) {
    let (dialed, accepted) = tcp_pair().await;
    tokio::join!(client.connect(host, carries, dialed), server.accept(accepted))
}

#[test]
fn tls_is_on_with_all_three_files_off_with_none_and_an_error_with_some() {
    let vars = |set: &'static [(&str, &str)]| {
        move |name: &str| set.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string())
    };
    assert_eq!(Files::from_vars(vars(&[])).unwrap(), None);
    assert_eq!(Files::from_vars(vars(&[(CERT_ENV, ""), (KEY_ENV, " ")])).unwrap(), None, "empty is unset");
    let all = Files::from_vars(vars(&[(CERT_ENV, "/c"), (KEY_ENV, "/k"), (CA_ENV, "/a")])).unwrap().unwrap();
    assert_eq!(all, Files { cert: "/c".into(), key: "/k".into(), ca: "/a".into() });
    assert_eq!(all.to_env()[2], (CA_ENV, "/a".to_string()));
    let some = Files::from_vars(vars(&[(CERT_ENV, "/c")])).unwrap_err();
    assert!(some.contains("OXRAY_TLS_KEY, OXRAY_TLS_CA not set"), "{some}");
}

#[test]
fn files_that_cannot_make_a_setup_are_named_in_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let files = Authority::new().node(dir.path(), "127.0.0.1");
    let missing = Tls::load(&Files { key: dir.path().join("nope.key"), ..files.clone() }).err().unwrap();
    assert!(missing.contains("cannot read the private key") && missing.contains("nope.key"), "{missing}");
    std::fs::write(dir.path().join("empty.crt"), "not a certificate\n").unwrap();
    let empty = Tls::load(&Files { ca: dir.path().join("empty.crt"), ..files.clone() }).err().unwrap();
    assert!(empty.contains("holds no PEM certificate"), "{empty}");
    // A key that is not the certificate's.
    let other = Authority::new().node(&tempfile::tempdir().unwrap().keep(), "127.0.0.1");
    let mismatched = Tls::load(&Files { key: other.key, ..files }).err().unwrap();
    assert!(mismatched.contains("do not make a TLS setup"), "{mismatched}");
}

#[tokio::test]
async fn nodes_of_one_authority_talk_and_the_server_learns_what_the_connection_carries() {
    let authority = Authority::new();
    let ((_a, server), (_b, client)) = (node(&authority, "127.0.0.1"), node(&authority, "10.0.0.2"));
    let (dialed, accepted) = handshake(&server, &client, "127.0.0.1", Carries::Tasks).await;
    let (mut dialed, mut accepted) = (Stream::Tls(Box::new(dialed.unwrap())), Stream::Tls(Box::new(accepted.unwrap())));
    assert_eq!(accepted.carries(), Some(Carries::Tasks));
    dialed.write_all(b"ping").await.unwrap();
    dialed.flush().await.unwrap();
    let mut got = [0u8; 4];
    accepted.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"ping");
}

#[tokio::test]
async fn a_server_whose_certificate_names_another_host_is_refused() {
    let authority = Authority::new();
    let ((_a, server), (_b, client)) = (node(&authority, "10.0.0.9"), node(&authority, "10.0.0.2"));
    let (dialed, _) = handshake(&server, &client, "127.0.0.1", Carries::Grpc).await;
    let refused = dialed.err().unwrap().to_string();
    assert!(refused.contains("certificate not valid for name"), "{refused}");
}

#[tokio::test]
async fn peers_of_another_authority_are_refused_both_ways() {
    let (ours, theirs) = (Authority::new(), Authority::new());
    let ((_a, server), (_b, stranger)) = (node(&ours, "127.0.0.1"), node(&theirs, "127.0.0.1"));
    let (dialed, accepted) = handshake(&server, &stranger, "127.0.0.1", Carries::Grpc).await;
    assert!(dialed.is_err(), "the stranger does not trust our server");
    assert!(accepted.is_err(), "nor ours the stranger");
    let (dialed, accepted) = handshake(&stranger, &server, "127.0.0.1", Carries::Grpc).await;
    assert!(dialed.is_err() && accepted.is_err());
}

#[tokio::test]
async fn a_plain_client_gets_no_answer_from_a_tls_server() {
    let (_a, server) = node(&Authority::new(), "127.0.0.1");
    let (mut dialed, accepted) = tcp_pair().await;
    let accepting = tokio::spawn(async move { server.accept(accepted).await.err().map(|e| e.to_string()) });
    dialed.write_all(b"OXTASKS1 and then some bytes that are no handshake").await.unwrap();
    let refused = accepting.await.unwrap().expect("the handshake fails");
    assert!(!refused.is_empty());
}

#[tokio::test]
async fn frames_sent_from_threads_cross_tls_whole_and_in_order() {
    let authority = Authority::new();
    let ((_a, server), (_b, client)) = (node(&authority, "127.0.0.1"), node(&authority, "127.0.0.1"));
    let (dialed, accepted) = handshake(&server, &client, "127.0.0.1", Carries::Tasks).await;
    let (_, writes) = frames::split(Stream::Tls(Box::new(dialed.unwrap())));
    let (reads, _) = frames::split(Stream::Tls(Box::new(accepted.unwrap())));
    let sender = Sender::pending(tokio::runtime::Handle::current(), b"HELLO");
    let chunk = |n: usize, seed: u8| DataChunk { data: (0..n).map(|i| (i as u8).wrapping_mul(seed)).collect() };
    sender.send(&chunk(10, 1)).unwrap();
    sender.connect(writes);
    let from_thread = sender.clone();
    std::thread::spawn(move || {
        for (i, n) in [4 * 1024 * 1024, 3, 0, 70_000].into_iter().enumerate() {
            from_thread.send(&chunk(n, i as u8 + 2)).unwrap();
        }
    })
    .join()
    .unwrap();
    let mut receiver = Receiver::new(reads);
    assert_eq!(receiver.exact(5).await.unwrap(), b"HELLO");
    let mut got = Vec::new();
    for _ in 0..5 {
        got.push(receiver.recv::<DataChunk>(u64::MAX).await.unwrap().unwrap());
    }
    let expected = [chunk(10, 1), chunk(4 * 1024 * 1024, 2), chunk(3, 3), chunk(0, 4), chunk(70_000, 5)];
    assert!(got == expected, "every message whole, in order");
}
