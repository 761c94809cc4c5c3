// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The kernel's delay accounting for one thread, over generic netlink
//! (`Documentation/accounting/taskstats.rst`): a `TASKSTATS_CMD_GET` by
//! pid, answered with `struct taskstats`. Only the delay totals the tests
//! hold kspan to are read, each checked against the answer's length.
//!
//! Delay accounting runs only with `kernel.task_delayacct=1`:
//! [`DelayAccounting::on`] sets it for as long as the guard lives and puts
//! the old value back.

use std::io;

const NETLINK_GENERIC: i32 = 16;
const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
const TASKSTATS_CMD_GET: u8 = 1;
const TASKSTATS_CMD_ATTR_PID: u16 = 1;
const TASKSTATS_TYPE_STATS: u16 = 3;
const TASKSTATS_TYPE_AGGR_PID: u16 = 4;
const NLM_F_REQUEST: u16 = 1;
const NLMSG_ERROR: u16 = 2;
const NLA_TYPE_MASK: u16 = 0x3fff;

/// A thread's delay totals (ns) and counts, as `struct taskstats` has them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Delays {
    /// `cpu_delay_total`: waiting on a run queue (the scheduler's run_delay).
    pub cpu_ns: u64,
    /// `blkio_count`.
    pub blkio_count: u64,
    /// `blkio_delay_total`: waiting for block I/O to complete.
    pub blkio_ns: u64,
}

/// `kernel.task_delayacct` switched on while alive.
pub struct DelayAccounting {
    /// The switch's setting before, where the kernel has the switch.
    before: Option<String>,
}

const SYSCTL: &str = "/proc/sys/kernel/task_delayacct";

impl DelayAccounting {
    /// Switches delay accounting on (root only), for threads' waits that
    /// start from now on.
    /// Kernels before 5.14 have no switch: delay accounting is on from
    /// boot there, unless the kernel was booted with `nodelayacct`.
    pub fn on() -> io::Result<Self> {
        let before = match std::fs::read_to_string(SYSCTL) {
            Ok(before) => before,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let cmdline = std::fs::read_to_string("/proc/cmdline")?;
                if cmdline.split_whitespace().any(|arg| arg == "nodelayacct") {
                    return Err(io::Error::other(
                        "this kernel has no kernel.task_delayacct switch and was booted with \
                         nodelayacct: delay accounting is off",
                    ));
                }
                return Ok(DelayAccounting { before: None });
            }
            Err(e) => return Err(e),
        };
        std::fs::write(SYSCTL, "1")?;
        Ok(DelayAccounting {
            before: Some(before),
        })
    }
}

impl Drop for DelayAccounting {
    fn drop(&mut self) {
        if let Some(before) = &self.before {
            let _ = std::fs::write(SYSCTL, before.trim());
        }
    }
}

/// A generic netlink socket with the `TASKSTATS` family resolved.
pub struct Taskstats {
    fd: i32,
    family: u16,
}

fn attr(buf: &mut Vec<u8>, kind: u16, payload: &[u8]) {
    let len = 4 + payload.len();
    buf.extend_from_slice(&(len as u16).to_ne_bytes());
    buf.extend_from_slice(&kind.to_ne_bytes());
    buf.extend_from_slice(payload);
    buf.resize(buf.len().next_multiple_of(4), 0);
}

/// The attributes in `bytes`, as (type, payload).
fn attrs(mut bytes: &[u8]) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    while bytes.len() >= 4 {
        let len = u16::from_ne_bytes([bytes[0], bytes[1]]) as usize;
        let kind = u16::from_ne_bytes([bytes[2], bytes[3]]) & NLA_TYPE_MASK;
        if len < 4 || len > bytes.len() {
            break;
        }
        out.push((kind, &bytes[4..len]));
        bytes = &bytes[len.next_multiple_of(4).min(bytes.len())..];
    }
    out
}

fn u64_at(bytes: &[u8], at: usize) -> io::Result<u64> {
    bytes
        .get(at..at + 8)
        .map(|b| u64::from_ne_bytes(b.try_into().unwrap()))
        .ok_or_else(|| io::Error::other(format!("struct taskstats too short for offset {at}")))
}

impl Taskstats {
    /// Opens the socket and resolves the family (needs CAP_NET_ADMIN for
    /// the queries).
    pub fn open() -> io::Result<Self> {
        // SAFETY: plain socket(2); the descriptor is owned by the result.
        let fd = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW, NETLINK_GENERIC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut s = Taskstats { fd, family: 0 };
        let mut payload = Vec::new();
        attr(&mut payload, CTRL_ATTR_FAMILY_NAME, b"TASKSTATS\0");
        let answer = s.ask(GENL_ID_CTRL, CTRL_CMD_GETFAMILY, &payload)?;
        s.family = attrs(&answer)
            .into_iter()
            .find(|(k, p)| *k == CTRL_ATTR_FAMILY_ID && p.len() >= 2)
            .map(|(_, p)| u16::from_ne_bytes([p[0], p[1]]))
            .ok_or_else(|| io::Error::other("no TASKSTATS family id in the answer"))?;
        Ok(s)
    }

    /// Sends one generic netlink request and returns the answer's
    /// attributes' bytes (after the genetlink header).
    fn ask(&self, family: u16, cmd: u8, payload: &[u8]) -> io::Result<Vec<u8>> {
        let mut msg = Vec::with_capacity(20 + payload.len());
        let len = (16 + 4 + payload.len()) as u32;
        msg.extend_from_slice(&len.to_ne_bytes());
        msg.extend_from_slice(&family.to_ne_bytes());
        msg.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
        msg.extend_from_slice(&1u32.to_ne_bytes()); // sequence
        msg.extend_from_slice(&0u32.to_ne_bytes()); // port: the kernel
        msg.extend_from_slice(&[cmd, 1, 0, 0]); // genetlink: cmd, version
        msg.extend_from_slice(payload);
        // SAFETY: the buffer is valid for its length; a zeroed sockaddr_nl
        // names the kernel.
        let sent = unsafe {
            let mut to: libc::sockaddr_nl = std::mem::zeroed();
            to.nl_family = libc::AF_NETLINK as u16;
            libc::sendto(
                self.fd,
                msg.as_ptr().cast(),
                msg.len(),
                0,
                (&to as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as u32,
            )
        };
        if sent < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut buf = vec![0u8; 8192];
        // SAFETY: recv(2) into a buffer valid for its length.
        let got = unsafe { libc::recv(self.fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
        if got < 0 {
            return Err(io::Error::last_os_error());
        }
        buf.truncate(got as usize);
        if buf.len() < 20 {
            return Err(io::Error::other("short netlink answer"));
        }
        let kind = u16::from_ne_bytes([buf[4], buf[5]]);
        if kind == NLMSG_ERROR {
            let errno = i32::from_ne_bytes(buf[16..20].try_into().unwrap());
            return Err(io::Error::from_raw_os_error(-errno));
        }
        let len = (u32::from_ne_bytes(buf[0..4].try_into().unwrap()) as usize).min(buf.len());
        Ok(buf[20..len].to_vec())
    }

    /// Thread `tid`'s delay totals now.
    pub fn delays(&self, tid: u32) -> io::Result<Delays> {
        let mut payload = Vec::new();
        attr(&mut payload, TASKSTATS_CMD_ATTR_PID, &tid.to_ne_bytes());
        let answer = self.ask(self.family, TASKSTATS_CMD_GET, &payload)?;
        let stats = attrs(&answer)
            .into_iter()
            .filter(|(k, _)| *k == TASKSTATS_TYPE_AGGR_PID)
            .flat_map(|(_, nested)| attrs(nested))
            .find(|(k, _)| *k == TASKSTATS_TYPE_STATS)
            .map(|(_, p)| p)
            .ok_or_else(|| io::Error::other("no struct taskstats in the answer"))?;
        // struct taskstats: u16 version, u32 ac_exitcode, u8 ac_flag,
        // u8 ac_nice, then (8-aligned) cpu_count, cpu_delay_total,
        // blkio_count, blkio_delay_total: the same place in every version.
        Ok(Delays {
            cpu_ns: u64_at(stats, 24)?,
            blkio_count: u64_at(stats, 32)?,
            blkio_ns: u64_at(stats, 40)?,
        })
    }
}

impl Drop for Taskstats {
    fn drop(&mut self) {
        // SAFETY: the descriptor is this value's own.
        unsafe { libc::close(self.fd) };
    }
}
