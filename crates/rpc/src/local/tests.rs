use super::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn listener() -> (TcpListener, u16) {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    (listener, port)
}

/// Accepts one connection and echoes what it reads; tells whether it came over Unix.
async fn serve_one(accepted: impl Stream<Item = io::Result<Conn>>) -> bool {
    let mut accepted = Box::pin(accepted);
    let mut conn = accepted.next().await.unwrap().unwrap();
    let mut buf = [0u8; 4];
    conn.read_exact(&mut buf).await.unwrap();
    conn.write_all(&buf).await.unwrap();
    conn.0.is_unix()
}

async fn echo(mut io: impl AsyncRead + AsyncWrite + Unpin) {
    io.write_all(b"ping").await.unwrap();
    let mut buf = [0u8; 4];
    io.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"ping");
}

#[tokio::test]
async fn a_local_server_is_reached_over_its_unix_socket() {
    let (listener, port) = listener().await;
    let server = tokio::spawn(serve_one(incoming(listener)));
    let socket = dial_address(&format!("127.0.0.1:{port}"), Carries::Grpc).await.unwrap();
    assert!(socket.is_unix(), "dialed over Unix");
    echo(socket).await;
    assert!(server.await.unwrap(), "accepted over Unix");
}

#[tokio::test]
async fn without_a_unix_socket_tcp_is_used() {
    // A plain TCP server, as another program's.
    let (listener, port) = listener().await;
    let server = tokio::spawn(async move {
        let (mut conn, _) = listener.accept().await.unwrap();
        let mut buf = [0u8; 4];
        conn.read_exact(&mut buf).await.unwrap();
        conn.write_all(&buf).await.unwrap();
    });
    let socket = dial("127.0.0.1", port, true).await.unwrap();
    assert!(!socket.is_unix(), "fell back to TCP");
    echo(SocketStream::new(socket)).await;
    server.await.unwrap();
}

#[test]
fn only_addresses_of_this_machine_are_here() {
    assert!(is_here("127.0.0.1") && is_here("::1") && is_here("[::1]"));
    // TEST-NET-1 (RFC 5737) is nobody's address.
    assert!(!is_here("192.0.2.1"));
    assert!(!is_here("head.example"));
}

#[tokio::test]
async fn a_socket_stream_waits_for_room_when_its_socket_is_full() {
    let (a, b) = UnixStream::pair().unwrap();
    let stream = |s| SocketStream::new(Socket::from_tokio_unix(s).unwrap());
    let (mut a, mut b) = (stream(a), stream(b));
    // Far more than a socket buffer holds: the writer must wait for the reader.
    let sent: Vec<u8> = (0..8 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    let expected = sent.clone();
    let writer = tokio::spawn(async move {
        a.write_all(&sent).await.unwrap();
        a.shutdown().await.unwrap();
    });
    let mut received = Vec::new();
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    b.read_to_end(&mut received).await.unwrap();
    writer.await.unwrap();
    assert!(received == expected, "every byte arrived in order");
}
