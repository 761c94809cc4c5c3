// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Consuming the ring buffer: a tokio task woken by the kernel (or a timer)
//! hands each record, in place, to a callback; [`parse_record`] reads one.
//! Turning records into spans is the next stage's, given as the callback.

mod record;

use std::os::fd::{AsRawFd, RawFd};

use libbpf_rs::{RingBuffer, RingBufferBuilder};
use tokio::io::unix::AsyncFd;
use tokio::sync::watch;

use crate::bpf::object::SharedMaps;
use crate::bpf::MapError;

pub(crate) use record::decode_capture;
pub use record::{parse_record, DecodeError, RecordHeader, RecordView};

/// The ring buffer of `maps`, with `on_record` run on each record as it is
/// consumed (no copy: the record is read where the kernel wrote it).
pub(crate) fn ring_buffer(
    maps: &SharedMaps,
    mut on_record: impl FnMut(&[u8]) + 'static,
) -> Result<RingBuffer<'static>, MapError> {
    let fail = |source| MapError {
        map: kspan_bpf::names::EVENTS_MAP,
        source,
    };
    let mut builder = RingBufferBuilder::new();
    builder
        .add(&maps.events, move |bytes: &[u8]| {
            on_record(bytes);
            0
        })
        .map_err(fail)?;
    builder.build().map_err(fail)
}

/// The ring buffer's epoll descriptor, for tokio's reactor.
struct EpollFd(RawFd);

impl AsRawFd for EpollFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

pub(crate) struct Consumer {
    // Declared before `ring`, so dropped before it: the descriptor it
    // watches belongs to the ring buffer.
    fd: AsyncFd<EpollFd>,
    ring: RingBuffer<'static>,
}

impl Consumer {
    /// Registers the ring buffer's epoll descriptor with `runtime`'s reactor;
    /// a failure fails `start`, not the consumer later.
    pub(crate) fn new(
        ring: RingBuffer<'static>,
        runtime: &tokio::runtime::Handle,
    ) -> std::io::Result<Self> {
        let _in_runtime = runtime.enter();
        // SAFETY: the epoll descriptor belongs to `ring`, which is moved into
        // the same `Consumer` and declared after `fd`, so it outlives the
        // `AsyncFd`; it stays open and refers to the same epoll instance for
        // the whole life of the `AsyncFd`.
        let fd = unsafe {
            AsyncFd::register_with_interest(EpollFd(ring.epoll_fd()), tokio::io::Interest::READABLE)
        }?;
        Ok(Consumer { fd, ring })
    }

    pub(crate) async fn run(self, mut stop: watch::Receiver<bool>) {
        let fd = &self.fd;
        // The kernel wakes the consumer only once KSPAN_WAKEUP_BYTES wait
        // (a wakeup per record would tax every traced call); the timer
        // collects a quieter trickle.
        let mut tick = tokio::time::interval(CONSUMER_POLL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.changed() => break,
                _ = tick.tick() => self.drain(),
                ready = fd.readable() => {
                    let mut guard = match ready {
                        Ok(guard) => guard,
                        Err(e) => {
                            // Not expected from an epoll descriptor; said
                            // loudly, and the rest is drained below.
                            tracing::error!(error = %e, "kspan stops polling its ring buffer");
                            break;
                        }
                    };
                    // Readiness is edge-triggered: cleared before draining,
                    // so that a wakeup sent while draining is not lost.
                    guard.clear_ready();
                    self.drain();
                }
            }
        }
        // Whatever the kernel wrote before the links went away.
        self.drain();
    }

    fn drain(&self) {
        if let Err(e) = self.ring.consume() {
            tracing::error!(error = %e, "kspan ring buffer consume failed");
        }
    }
}

/// How long a record may wait in the ring buffer when fewer than
/// `KSPAN_WAKEUP_BYTES` are waiting (documented with `Kspan`).
const CONSUMER_POLL: std::time::Duration = std::time::Duration::from_millis(50);
