use super::testing::{handshake, node, ping, tcp_pair, Authority};
use super::*;
use tokio::io::AsyncWriteExt;

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
    let (mut dialed, mut accepted) = (dialed.unwrap(), accepted.unwrap());
    assert_eq!(Carries::of(accepted.get_ref().1.alpn_protocol()), Carries::Tasks);
    ping(&mut dialed, &mut accepted).await;
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

#[test]
fn tls_is_on_unless_the_head_can_only_be_on_this_machine_or_it_is_turned_off() {
    let files = Files { cert: "/c".into(), key: "/k".into(), ca: "/a".into() };
    let on = |head: &str| decide(None, None, head, only_this_machine(head), None).unwrap();
    assert_eq!(decide(Some(files.clone()), Some("off"), "127.0.0.1:1", true, None).unwrap(), Mode::Files(files));
    assert_eq!(on("10.0.0.1:6379"), Mode::Auto);
    assert_eq!(decide(None, None, "head-svc:6379", false, None).unwrap(), Mode::Auto);
    for head in ["127.0.0.1:6379", "127.1.0.3:6379", "localhost:6379", "[::1]:6379", ""] {
        assert_eq!(on(head), Mode::Off, "{head}");
    }
    assert_eq!(decide(None, Some("auto"), "127.0.0.1:6379", true, None).unwrap(), Mode::Auto);
    assert_eq!(decide(None, Some(" off "), "10.0.0.1:6379", false, None).unwrap(), Mode::Off);
    let bad = decide(None, Some("yes"), "10.0.0.1:6379", false, None).unwrap_err();
    assert!(bad.contains("OXRAY_TLS") && bad.contains("\"yes\""), "{bad}");
    // The cluster started here, reached at the address it was started at or on loopback.
    let recorded = Some(("10.0.0.1:6379", "off"));
    assert_eq!(decide(None, None, "10.0.0.1:6379", false, recorded).unwrap(), Mode::Off);
    assert_eq!(decide(None, None, "10.0.0.2:6379", false, recorded).unwrap(), Mode::Auto, "another cluster");
    let auto = Some(("10.0.0.1:6379", "auto"));
    assert_eq!(decide(None, None, "10.0.0.1:6379", false, auto).unwrap(), Mode::Auto);
    assert_eq!(decide(None, None, "127.0.0.1:6379", true, auto).unwrap(), Mode::Auto, "its port on loopback");
    assert_eq!(decide(None, None, "localhost:6380", true, auto).unwrap(), Mode::Off, "another port");
}

#[test]
fn only_loopback_addresses_are_this_machine_and_names_are_not_resolved() {
    assert!(only_this_machine("localhost:6379") && only_this_machine("127.1.0.3:6379"));
    assert!(!only_this_machine("10.0.0.1:6379"));
    assert!(!only_this_machine("head-svc.default.svc:6379"), "a name may lead anywhere when dialed");
}
