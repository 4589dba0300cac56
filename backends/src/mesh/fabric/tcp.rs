//! Frames over TCP, and the rendezvous that connects the processes, in `torchrun`'s
//! terms: `RANK`, `WORLD_SIZE`, `MASTER_ADDR` (default `127.0.0.1`) and `MASTER_PORT`.
//!
//! 1. Rank 0 listens on `MASTER_PORT`. Every other rank opens a listener of its own,
//!    connects to `MASTER_ADDR:MASTER_PORT` (retrying until rank 0 is up) and says
//!    hello: its rank, the world size, the program's fingerprint and its listener's
//!    port.
//! 2. When all have joined, rank 0 checks that they agree (one world size, one program,
//!    no rank twice) and sends each the table of listeners (the address rank 0 saw the
//!    hello come from, and the port), or the reason it refuses.
//! 3. Rank j connects to the listener of every rank 0 < i < j. The links are a full mesh.
//!
//! Every wait ends after `TESSERA_FABRIC_TIMEOUT` seconds (default 120) with a message
//! that names the rank it waited for.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use super::{Fabric, Link};

const MAGIC: &[u8; 4] = b"TSR1";

/// Where this process sits and whom it meets.
#[derive(Clone, Debug)]
pub struct Rendezvous {
    pub rank: usize,
    pub world: usize,
    pub master_addr: String,
    pub master_port: u16,
    pub timeout: Duration,
}

impl Rendezvous {
    /// From the environment `torchrun` (or a job launcher) sets.
    pub fn from_env() -> Result<Rendezvous, String> {
        let var = |name: &str| std::env::var(name).map_err(|_| format!("{name} is not set"));
        let number = |name: &str| -> Result<usize, String> {
            var(name)?.trim().parse().map_err(|_| format!("{name} is not a non-negative integer"))
        };
        let (rank, world) = (number("RANK")?, number("WORLD_SIZE")?);
        if world == 0 || rank >= world {
            return Err(format!("RANK {rank} is not below WORLD_SIZE {world}"));
        }
        let master_port: u16 =
            var("MASTER_PORT")?.trim().parse().map_err(|_| "MASTER_PORT is not a port number".to_string())?;
        let master_addr = std::env::var("MASTER_ADDR").unwrap_or_else(|_| "127.0.0.1".into());
        let timeout = match std::env::var("TESSERA_FABRIC_TIMEOUT") {
            Ok(s) => Duration::from_secs_f64(
                s.trim().parse::<f64>().ok().filter(|t| *t > 0.0).ok_or("TESSERA_FABRIC_TIMEOUT is not seconds")?,
            ),
            Err(_) => Duration::from_secs(120),
        };
        Ok(Rendezvous { rank, world, master_addr, master_port, timeout })
    }

    /// Meets the other processes (`fingerprint`: what they must all run) and returns
    /// the fabric over TCP.
    pub fn connect(&self, fingerprint: u64) -> Result<Fabric, String> {
        let links = self.meet(fingerprint)?;
        Ok(Fabric::new(self.rank, self.world, "TCP", Box::new(TcpLink { rank: self.rank, links })))
    }

    /// The full mesh of streams, indexed by rank (`None` at this rank).
    pub(crate) fn meet(&self, fingerprint: u64) -> Result<Vec<Option<TcpStream>>, String> {
        let mut links: Vec<Option<TcpStream>> = (0..self.world).map(|_| None).collect();
        if self.world == 1 {
            return Ok(links);
        }
        let deadline = Instant::now() + self.timeout;
        if self.rank == 0 {
            let listener = TcpListener::bind((Ipv4Addr::UNSPECIFIED, self.master_port))
                .map_err(|e| format!("rank 0 cannot listen on port {}: {e}", self.master_port))?;
            let mut table = vec![(IpAddr::V4(Ipv4Addr::LOCALHOST), 0u16); self.world];
            let mut refusal = None;
            for _ in 1..self.world {
                let (mut s, from) = accept(&listener, deadline, || {
                    let missing: Vec<String> =
                        (1..self.world).filter(|&r| links[r].is_none()).map(|r| r.to_string()).collect();
                    format!("rank 0 waited {:?} for ranks {} to join", self.timeout, missing.join(", "))
                })?;
                let hello = read_hello(&mut s, deadline)?;
                if hello.world != self.world {
                    refusal.get_or_insert(format!(
                        "rank {} has WORLD_SIZE {}, rank 0 has {}",
                        hello.rank, hello.world, self.world
                    ));
                } else if hello.fingerprint != fingerprint {
                    refusal.get_or_insert(format!(
                        "rank {} runs another program or other inputs than rank 0 (the file, function, dims and seed must be the same on every rank)",
                        hello.rank
                    ));
                } else if hello.rank == 0 || hello.rank >= self.world || links[hello.rank].is_some() {
                    refusal.get_or_insert(format!("two processes say they are rank {}", hello.rank));
                }
                if hello.rank != 0 && hello.rank < self.world && links[hello.rank].is_none() {
                    table[hello.rank] = (from.ip(), hello.port);
                    links[hello.rank] = Some(s);
                } else if let Some(why) = &refusal {
                    let _ = write_reply(&mut s, Err(why));
                }
            }
            let reply = match &refusal {
                Some(why) => Err(why.as_str()),
                None => Ok(&table[..]),
            };
            for s in links.iter_mut().flatten() {
                let _ = write_reply(s, reply);
            }
            if let Some(why) = refusal {
                return Err(why);
            }
        } else {
            let master = resolve(&self.master_addr, self.master_port)?;
            let mut to_master = connect(master, deadline, "rank 0")?;
            // Listen on the interface that reaches rank 0, so that the others reach it too.
            let ip = to_master.local_addr().map_err(|e| e.to_string())?.ip();
            let listener = TcpListener::bind((ip, 0)).map_err(|e| format!("rank {} cannot listen: {e}", self.rank))?;
            let port = listener.local_addr().map_err(|e| e.to_string())?.port();
            write_hello(&mut to_master, &Hello { rank: self.rank, world: self.world, fingerprint, port })?;
            let table = read_reply(&mut to_master, deadline, self.world)?;
            links[0] = Some(to_master);
            for (peer, &(ip, port)) in table.iter().enumerate().take(self.rank).skip(1) {
                let mut s = connect(SocketAddr::new(ip, port), deadline, &format!("rank {peer}"))?;
                s.write_all(&(self.rank as u32).to_le_bytes()).map_err(|e| format!("to rank {peer}: {e}"))?;
                links[peer] = Some(s);
            }
            for _ in self.rank + 1..self.world {
                let (mut s, _) = accept(&listener, deadline, || {
                    format!("rank {} waited {:?} for the ranks above it to connect", self.rank, self.timeout)
                })?;
                let mut b = [0u8; 4];
                read_exact(&mut s, &mut b, deadline, "a higher rank")?;
                let peer = u32::from_le_bytes(b) as usize;
                if peer <= self.rank || peer >= self.world || links[peer].is_some() {
                    return Err(format!("rank {}: a connection from rank {peer}, which was not expected", self.rank));
                }
                links[peer] = Some(s);
            }
        }
        for s in links.iter().flatten() {
            s.set_nodelay(true).map_err(|e| e.to_string())?;
            s.set_read_timeout(Some(self.timeout)).map_err(|e| e.to_string())?;
        }
        Ok(links)
    }
}

struct Hello {
    rank: usize,
    world: usize,
    fingerprint: u64,
    port: u16,
}

fn write_hello(s: &mut TcpStream, h: &Hello) -> Result<(), String> {
    let mut b = MAGIC.to_vec();
    b.extend((h.rank as u32).to_le_bytes());
    b.extend((h.world as u32).to_le_bytes());
    b.extend(h.fingerprint.to_le_bytes());
    b.extend(h.port.to_le_bytes());
    s.write_all(&b).map_err(|e| format!("saying hello to rank 0: {e}"))
}

fn read_hello(s: &mut TcpStream, deadline: Instant) -> Result<Hello, String> {
    let mut b = [0u8; 22];
    read_exact(s, &mut b, deadline, "a joining rank")?;
    if &b[..4] != MAGIC {
        return Err("a connection to MASTER_PORT that is not a Tessera rank".into());
    }
    let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes")) as usize;
    Ok(Hello {
        rank: u32_at(4),
        world: u32_at(8),
        fingerprint: u64::from_le_bytes(b[12..20].try_into().expect("8 bytes")),
        port: u16::from_le_bytes([b[20], b[21]]),
    })
}

/// Rank 0's answer: `1` and the table (per rank: 16 address bytes and a port), or `0`
/// and the reason.
fn write_reply(s: &mut TcpStream, reply: Result<&[(IpAddr, u16)], &str>) -> std::io::Result<()> {
    let mut b = Vec::new();
    match reply {
        Ok(table) => {
            b.push(1);
            for (ip, port) in table {
                let v6 = match ip {
                    IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                    IpAddr::V6(v6) => *v6,
                };
                b.extend(v6.octets());
                b.extend(port.to_le_bytes());
            }
        }
        Err(why) => {
            b.push(0);
            b.extend((why.len() as u32).to_le_bytes());
            b.extend(why.as_bytes());
        }
    }
    s.write_all(&b)
}

fn read_reply(s: &mut TcpStream, deadline: Instant, world: usize) -> Result<Vec<(IpAddr, u16)>, String> {
    let mut tag = [0u8; 1];
    read_exact(s, &mut tag, deadline, "rank 0")?;
    if tag[0] == 0 {
        let mut n = [0u8; 4];
        read_exact(s, &mut n, deadline, "rank 0")?;
        let mut why = vec![0u8; u32::from_le_bytes(n) as usize];
        read_exact(s, &mut why, deadline, "rank 0")?;
        return Err(format!("rank 0 refused the mesh: {}", String::from_utf8_lossy(&why)));
    }
    let mut b = vec![0u8; world * 18];
    read_exact(s, &mut b, deadline, "rank 0")?;
    Ok(b.chunks(18)
        .map(|e| {
            let v6 = std::net::Ipv6Addr::from(<[u8; 16]>::try_from(&e[..16]).expect("16 bytes"));
            let ip = v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4);
            (ip, u16::from_le_bytes([e[16], e[17]]))
        })
        .collect())
}

fn resolve(host: &str, port: u16) -> Result<SocketAddr, String> {
    (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("MASTER_ADDR {host}: {e}"))?
        .next()
        .ok_or_else(|| format!("MASTER_ADDR {host} has no address"))
}

/// Connects, retrying while the other side is not listening yet.
fn connect(addr: SocketAddr, deadline: Instant, whom: &str) -> Result<TcpStream, String> {
    loop {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() >= deadline => return Err(format!("cannot reach {whom} at {addr}: {e}")),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

fn accept(
    listener: &TcpListener,
    deadline: Instant,
    late: impl Fn() -> String,
) -> Result<(TcpStream, SocketAddr), String> {
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    loop {
        match listener.accept() {
            Ok((s, from)) => {
                s.set_nonblocking(false).map_err(|e| e.to_string())?;
                return Ok((s, from));
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    return Err(late());
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

fn read_exact(s: &mut TcpStream, b: &mut [u8], deadline: Instant, whom: &str) -> Result<(), String> {
    let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
    s.set_read_timeout(Some(left)).map_err(|e| e.to_string())?;
    s.read_exact(b).map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => format!("{whom} did not answer in time"),
        std::io::ErrorKind::UnexpectedEof => format!("{whom} closed its connection"),
        _ => format!("reading from {whom}: {e}"),
    })
}

/// The frames of one step over the mesh of streams: each frame is its length in values
/// (u64) and the values (f64, little-endian). Writers run on their own threads, so that
/// two processes sending each other large frames do not both block in `write`.
struct TcpLink {
    rank: usize,
    links: Vec<Option<TcpStream>>,
}

impl Link for TcpLink {
    fn swap(&mut self, frames: Vec<Vec<f64>>) -> Result<Vec<Vec<f64>>, String> {
        let rank = self.rank;
        std::thread::scope(|scope| {
            let writers: Vec<_> = self
                .links
                .iter()
                .zip(frames)
                .enumerate()
                .filter_map(|(peer, (link, frame))| {
                    let mut s = link.as_ref()?;
                    Some(scope.spawn(move || {
                        let mut b = Vec::with_capacity(8 + 8 * frame.len());
                        b.extend((frame.len() as u64).to_le_bytes());
                        frame.iter().for_each(|x| b.extend(x.to_le_bytes()));
                        s.write_all(&b).map_err(|e| format!("rank {rank} sending to rank {peer}: {e}"))
                    }))
                })
                .collect();
            let mut received = vec![Vec::new(); self.links.len()];
            let mut failure = None;
            for (peer, link) in self.links.iter().enumerate() {
                let Some(mut s) = link.as_ref() else { continue };
                match read_frame(&mut s) {
                    Ok(frame) => received[peer] = frame,
                    Err(e) => {
                        failure.get_or_insert(format!("rank {rank} receiving from rank {peer}: {e}"));
                        // The other reads would wait for the same step: stop here.
                        let _ = s.shutdown(std::net::Shutdown::Both);
                        break;
                    }
                }
            }
            for w in writers {
                let sent = w.join().map_err(|_| "a sender thread panicked".to_string())?;
                if let Err(e) = sent {
                    failure.get_or_insert(e);
                }
            }
            match failure {
                Some(e) => Err(e),
                None => Ok(received),
            }
        })
    }
}

fn read_frame(s: &mut &TcpStream) -> Result<Vec<f64>, String> {
    let mut n = [0u8; 8];
    s.read_exact(&mut n).map_err(io_message)?;
    let n = u64::from_le_bytes(n) as usize;
    let mut b = vec![0u8; n.checked_mul(8).ok_or("a frame too long")?];
    s.read_exact(&mut b).map_err(io_message)?;
    Ok(b.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes"))).collect())
}

fn io_message(e: std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            "no frame within TESSERA_FABRIC_TIMEOUT (is that rank still running the same program?)".into()
        }
        std::io::ErrorKind::UnexpectedEof => "it closed the connection (did that rank fail?)".into(),
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn free_port() -> u16 {
        TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
    }

    fn rendezvous(rank: usize, world: usize, port: u16) -> Rendezvous {
        Rendezvous { rank, world, master_addr: "127.0.0.1".into(), master_port: port, timeout: Duration::from_secs(20) }
    }

    #[test]
    fn four_ranks_meet_and_swap_frames() {
        let port = free_port();
        let results: Vec<Vec<Vec<f64>>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..4)
                .map(|rank| {
                    scope.spawn(move || {
                        let fabric = rendezvous(rank, 4, port).connect(7).unwrap();
                        // Two steps, the second with a frame large enough to fill socket buffers.
                        fabric.all_gather(vec![rank as f64; 3]).unwrap();
                        fabric.all_gather(vec![rank as f64; 300_000]).unwrap()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for got in results {
            for (peer, frame) in got.iter().enumerate() {
                assert_eq!(frame.len(), 300_000);
                assert!(frame.iter().all(|&x| x == peer as f64));
            }
        }
    }

    #[test]
    fn a_rank_with_another_program_or_world_size_is_refused_by_name() {
        let port = free_port();
        let errors: Vec<String> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..3)
                .map(|rank| {
                    scope.spawn(move || {
                        let fingerprint = if rank == 2 { 8 } else { 7 };
                        rendezvous(rank, 3, port).connect(fingerprint).unwrap_err()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(errors[0].contains("rank 2 runs another program"), "{errors:?}");
        assert!(errors[1].starts_with("rank 0 refused the mesh: rank 2 runs another program"), "{errors:?}");
    }

    #[test]
    fn a_missing_rank_is_named_after_the_timeout() {
        let port = free_port();
        let mut r = rendezvous(0, 3, port);
        r.timeout = Duration::from_millis(300);
        let err = std::thread::scope(|scope| {
            let joined = scope.spawn(move || {
                let mut one = rendezvous(1, 3, port);
                one.timeout = Duration::from_millis(600);
                one.connect(7)
            });
            let err = r.connect(7).unwrap_err();
            let _ = joined.join();
            err
        });
        assert!(err.contains("for ranks 2 to join"), "{err}");
    }
}
