// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The links that hold programs attached, and detaching them in order.

use std::os::fd::{AsFd as _, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// One attached program: dropping the link detaches it.
#[derive(Debug)]
pub(crate) struct Link {
    kind: LinkKind,
    // Held for its `Drop`.
    _fd: OwnedFd,
}

/// What a link attaches, which decides how it is detached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LinkKind {
    /// A BPF trampoline: the kernel serialises their updates.
    Trampoline,
    /// A kprobe (one function or many): detaches wait for RCU, in parallel.
    Kprobe,
    /// A tracepoint.
    Tracepoint,
}

impl Link {
    pub(crate) fn new(kind: LinkKind, fd: OwnedFd) -> Self {
        Link { kind, _fd: fd }
    }
}

/// Every link of a runtime, entry and exit apart: every entry is detached
/// before any exit, so that a call entered before its entry went away still
/// finds its exit (exits first would strand frames on busy threads while
/// detaches wait for RCU, and fill their stacks).
///
/// The programs are kept too, and closed only once every link is gone: a
/// program whose last reference goes away is freed, and freeing JIT-ed code
/// patches kernel text, which detaching trampolines waits on too.
#[derive(Debug, Default)]
pub(crate) struct Links {
    entry: Vec<Link>,
    exit: Vec<Link>,
    programs: Arc<Programs>,
}

/// The programs of a runtime, and how often the kernel skipped them:
/// shared with the runtime's figures, which read it without waiting on a
/// detach.
#[derive(Debug, Default)]
pub(crate) struct Programs {
    open: Mutex<Vec<OwnedFd>>,
    /// Skipped runs of the programs already closed.
    closed_skips: AtomicU64,
}

impl Programs {
    /// Runs of the programs the kernel skipped, closed ones included (a
    /// program it cannot ask about counts none).
    pub(crate) fn skipped(&self) -> u64 {
        let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        self.closed_skips.load(Ordering::Relaxed) + skips(&open)
    }

    fn keep(&self, programs: impl IntoIterator<Item = OwnedFd>) {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.extend(programs);
    }

    fn close_all(&self) {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        self.closed_skips.fetch_add(skips(&open), Ordering::Relaxed);
        open.clear();
    }
}

fn skips(programs: &[OwnedFd]) -> u64 {
    programs
        .iter()
        .filter_map(|p| crate::bpf::sys::prog_recursion_misses(p.as_fd()).ok())
        .sum()
}

impl Links {
    /// Keeps the links of one function (or one multi-function attach) and
    /// their programs.
    pub(crate) fn keep(
        &mut self,
        exit: Option<Link>,
        entry: Link,
        programs: impl IntoIterator<Item = Option<OwnedFd>>,
    ) {
        self.exit.extend(exit);
        self.entry.push(entry);
        self.programs.keep(programs.into_iter().flatten());
    }

    /// The programs, for the figures.
    pub(crate) fn programs(&self) -> Arc<Programs> {
        self.programs.clone()
    }

    /// How many links are held.
    pub(crate) fn len(&self) -> usize {
        self.entry.len() + self.exit.len()
    }

    /// Detaches every entry program, then every exit program.
    pub(crate) fn detach_all(&mut self) {
        let started = std::time::Instant::now();
        let links = self.len();
        detach(std::mem::take(&mut self.entry));
        detach(std::mem::take(&mut self.exit));
        self.programs.close_all();
        tracing::debug!(links, elapsed = ?started.elapsed(), "kspan detached");
    }
}

/// Drops `links`: kprobe links from up to [`DETACH_THREADS`] threads (their
/// RCU waits overlap), the others one by one. Trampoline detaches gain
/// nothing from threads (the kernel serialises them), and concurrent ones
/// were seen to make the 6.12 guest under QEMU/TCG hit a stray int3 while
/// the kernel live-patched a traced function's entry.
fn detach(links: Vec<Link>) {
    let (kprobes, others): (Vec<_>, Vec<_>) =
        links.into_iter().partition(|l| l.kind == LinkKind::Kprobe);
    for link in others.into_iter().rev() {
        drop(link);
    }
    if kprobes.len() < 2 {
        return;
    }
    let threads = DETACH_THREADS.min(kprobes.len());
    let mut shares: Vec<Vec<Link>> = (0..threads).map(|_| Vec::new()).collect();
    for (i, link) in kprobes.into_iter().enumerate() {
        shares[i % threads].push(link);
    }
    std::thread::scope(|scope| {
        for share in shares {
            scope.spawn(move || {
                let _quiet = crate::context::suppress();
                drop(share);
            });
        }
    });
}

/// Threads that detach at once: measured on Debian 12's kernel, 71
/// functions' kprobe pairs detach in 12.7 s one by one, 6.9 s from 8
/// threads and 6.3 s from 16.
const DETACH_THREADS: usize = 16;
