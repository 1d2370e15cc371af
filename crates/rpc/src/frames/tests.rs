use super::*;
use oxray_proto::v1::DataChunk;
use tokio::net::UnixStream;

fn pair() -> (Arc<Socket>, Arc<Socket>) {
    let (a, b) = UnixStream::pair().unwrap();
    (Arc::new(Socket::from_tokio_unix(a).unwrap()), Arc::new(Socket::from_tokio_unix(b).unwrap()))
}

fn chunk(n: usize, seed: u8) -> DataChunk {
    DataChunk { data: (0..n).map(|i| (i as u8).wrapping_mul(seed)).collect() }
}

#[tokio::test]
async fn frames_sent_from_other_threads_arrive_whole_and_in_order() {
    let (a, b) = pair();
    let sender = Sender::pending(tokio::runtime::Handle::current(), b"HELLO");
    // Sent before the socket is there, then around a message far larger than the socket
    // holds, from a thread outside the runtime: the backlog keeps their order.
    sender.send(&chunk(10, 1)).unwrap();
    sender.connect(Writes::Socket(a));
    let from_thread = sender.clone();
    std::thread::spawn(move || {
        for (i, n) in [8 * 1024 * 1024, 3, 0, 70_000].into_iter().enumerate() {
            from_thread.send(&chunk(n, i as u8 + 2)).unwrap();
        }
    })
    .join()
    .unwrap();
    let mut receiver = Receiver::new(Reads::Socket(b));
    assert_eq!(receiver.exact(5).await.unwrap(), b"HELLO");
    let mut got = vec![receiver.recv::<DataChunk>(u64::MAX).await.unwrap().unwrap()];
    for _ in 0..4 {
        got.push(receiver.recv(u64::MAX).await.unwrap().unwrap());
    }
    let expected = [chunk(10, 1), chunk(8 * 1024 * 1024, 2), chunk(3, 3), chunk(0, 4), chunk(70_000, 5)];
    assert!(got == expected, "every message whole, in order");
}

#[tokio::test]
async fn the_end_of_a_connection_is_told_from_a_cut_message() {
    let (a, b) = pair();
    let frame = encode(&chunk(100, 1));
    a.try_write(&[IoSlice::new(&frame)]).unwrap();
    a.try_write(&[IoSlice::new(&frame[..50])]).unwrap();
    a.shutdown().unwrap();
    let mut receiver = Receiver::new(Reads::Socket(b));
    assert_eq!(receiver.recv::<DataChunk>(1000).await.unwrap(), Some(chunk(100, 1)));
    let cut = receiver.recv::<DataChunk>(1000).await.unwrap_err();
    assert_eq!(cut.kind(), io::ErrorKind::UnexpectedEof);

    let (a, b) = pair();
    drop(a);
    assert_eq!(Receiver::new(Reads::Socket(b)).recv::<DataChunk>(1000).await.unwrap(), None, "a clean end");
}

#[tokio::test]
async fn a_message_over_the_limit_is_refused_and_a_broken_sender_says_why() {
    let (a, b) = pair();
    let sender = Sender::connected(tokio::runtime::Handle::current(), Writes::Socket(a));
    sender.send(&chunk(5000, 1)).unwrap();
    let refused = Receiver::new(Reads::Socket(b.clone())).recv::<DataChunk>(HELLO_LIMIT.min(1000)).await.unwrap_err();
    assert_eq!(refused.kind(), io::ErrorKind::InvalidData);
    drop(b);
    // The peer is gone: a send fails (at once or at the next), and every later one too.
    let first = sender.send(&chunk(10, 1));
    let second = sender.send(&chunk(10, 1)).unwrap_err();
    assert!(first.is_err() || second.contains("broke"), "{first:?} {second}");
}

#[tokio::test]
async fn frames_sent_from_threads_cross_tls_whole_and_in_order() {
    use crate::tls::testing::{handshake, node, Authority};
    use crate::tls::Carries;
    let authority = Authority::new();
    let ((_a, server), (_b, client)) = (node(&authority, "127.0.0.1"), node(&authority, "127.0.0.1"));
    let (dialed, accepted) = handshake(&server, &client, "127.0.0.1", Carries::Tasks).await;
    let (_, writes) = split(Stream::Tls(Box::new(dialed.unwrap())));
    let (reads, _) = split(Stream::Tls(Box::new(accepted.unwrap())));
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
