//! [`FaultyLink`]: a TCP proxy on loopback between a client and a server that can stop
//! forwarding (a database that drops packets rather than refusing them), swallow the server's
//! answers (a statement that committed whose answer is lost), and cut every connection.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the link does with the bytes it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Both ways, as they come.
    Forward,
    /// Nothing either way: bytes wait in the link (and new connections are accepted but get no
    /// answer), as when a firewall drops packets. Back to [`Mode::Forward`], they flow again.
    Blackhole,
    /// The client's bytes reach the server; the server's answers are dropped.
    SwallowAnswers,
}

/// A proxy from a loopback port to `upstream` that can stop forwarding, swallow answers and cut
/// connections. Stops when dropped.
#[derive(Debug)]
pub struct FaultyLink {
    addr: SocketAddr,
    mode: watch::Sender<(Mode, u64)>,
    task: tokio::task::JoinHandle<()>,
}

impl FaultyLink {
    /// Listens on a free loopback port, forwarding to `upstream`.
    ///
    /// # Errors
    /// The listener's I/O error.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (mode, watching) = watch::channel((Mode::Forward, 0));
        let watching = Arc::new(watching);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let watching = (*watching).clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    carry(client, server, watching).await;
                });
            }
        });
        Ok(Self { addr, mode, task })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// From now on, does as `mode` says.
    pub fn set(&self, mode: Mode) {
        self.mode.send_modify(|(m, _)| *m = mode);
    }

    /// Closes every connection open now (new ones are carried as the mode says).
    pub fn cut(&self) {
        self.mode.send_modify(|(_, cuts)| *cuts += 1);
    }
}

impl Drop for FaultyLink {
    fn drop(&mut self) {
        self.cut();
        self.task.abort();
    }
}

/// Carries one connection both ways until either side closes or the link cuts it.
async fn carry(client: TcpStream, server: TcpStream, watching: watch::Receiver<(Mode, u64)>) {
    let cuts = watching.borrow().1;
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let up = pump(client_read, server_write, watching.clone(), cuts, false);
    let down = pump(server_read, client_write, watching, cuts, true);
    tokio::select! {
        () = up => {}
        () = down => {}
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut watching: watch::Receiver<(Mode, u64)>,
    cuts: u64,
    answers: bool,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        // Wait, without reading, while the link holds everything.
        loop {
            let (mode, now) = *watching.borrow_and_update();
            if now != cuts {
                return;
            }
            if mode != Mode::Blackhole {
                break;
            }
            if watching.changed().await.is_err() {
                return;
            }
        }
        let n = tokio::select! {
            read = from.read(&mut buf) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
            changed = watching.changed() => {
                if changed.is_err() {
                    return;
                }
                continue;
            }
        };
        // The mode may have changed while the bytes were on their way: judged now.
        loop {
            let (mode, now) = *watching.borrow_and_update();
            if now != cuts {
                return;
            }
            match mode {
                Mode::Forward | Mode::SwallowAnswers => break,
                Mode::Blackhole => {
                    if watching.changed().await.is_err() {
                        return;
                    }
                }
            }
        }
        if answers && watching.borrow().0 == Mode::SwallowAnswers {
            continue;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
