// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Consuming the ring buffer: a thread woken by the kernel (or a timeout)
//! hands each record, in place, to a callback; [`parse_record`] reads one.
//! Turning records into spans is the next stage's, given as the callback.

mod claim;
mod fanout;
#[cfg(test)]
pub(crate) mod properties;
mod record;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use libbpf_rs::{RingBuffer, RingBufferBuilder};

use crate::bpf::maps::SharedMaps;
use crate::bpf::MapError;

pub(crate) use claim::{Claim, PROCESS};
pub(crate) use fanout::{panic_message, Fanout};
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

/// The consumer: a thread of kspan's own that waits on the ring buffer
/// and hands every record to the callback.
///
/// A thread rather than a task of the application's runtime: spans are
/// built and handed to the application's processors here, and a processor
/// that blocks (a `SimpleSpanProcessor` exporting inline) then blocks this
/// thread only, never a runtime worker; nor does kspan need the runtime's IO
/// driver or timer, or outlive it. The application's runtime, when there is
/// one, is entered on this thread, so that exporters which need it (tonic)
/// find it.
pub(crate) struct Consumer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// The runtime's claim on the process, released once the thread is
    /// gone (after the fields above: `Drop` stops the thread first).
    _claim: Claim,
}

impl Consumer {
    /// Starts consuming `ring` on a new thread, holding `claim` while it
    /// lives, within `runtime` if given, with `hooks` run on that thread.
    pub(crate) fn start<D, E, T, C>(
        ring: RingBuffer<'static>,
        claim: Claim,
        runtime: Option<tokio::runtime::Handle>,
        hooks: Hooks<D, E, T, C>,
    ) -> std::io::Result<Self>
    where
        D: FnOnce() + Send + 'static,
        E: FnOnce() + Send + 'static,
        T: FnMut() + Send + 'static,
        C: FnMut() + Send + 'static,
    {
        let Hooks {
            on_death,
            on_drained,
            mut on_tick,
            mut on_consumed,
        } = hooks;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::Builder::new()
            .name("kspan-consumer".to_owned())
            .spawn(move || {
                let _in_runtime = runtime.as_ref().map(tokio::runtime::Handle::enter);
                // kspan's own calls (waiting on the ring buffer, the
                // processors' exports) make no kernel spans.
                let _quiet = crate::context::suppress();
                let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    run(&ring, &stopped, &mut on_tick, &mut on_consumed)
                }));
                // What the callback still holds is handed on before the
                // consumer counts as ended.
                let ran = match ran {
                    Ok(true) => std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        on_drained();
                        true
                    })),
                    other => other,
                };
                match ran {
                    Ok(true) => on_tick(),
                    Ok(false) => on_death(),
                    Err(panic) => {
                        on_death();
                        std::panic::resume_unwind(panic);
                    }
                }
            })?;
        Ok(Consumer {
            stop,
            thread: Some(thread),
            _claim: claim,
        })
    }

    /// Drains what is left and stops; `Err` with the panic's message when
    /// the thread panicked.
    pub(crate) fn stop(&mut self) -> Result<(), String> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take().map(JoinHandle::join) {
            Some(Err(panic)) => Err(panic_message(&*panic)),
            _ => Ok(()),
        }
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// What runs on the consumer's thread besides the ring's callback.
pub(crate) struct Hooks<D, E, T, C> {
    /// When the thread ends without being asked to (the ring buffer cannot
    /// be polled, or the pipeline panicked), before the panic goes on.
    pub on_death: D,
    /// Once the ring is drained after a stop, for what the callback still
    /// holds.
    pub on_drained: E,
    /// About every [`TICK`] between records, and once more after
    /// `on_drained`.
    pub on_tick: T,
    /// After each time the ring was read to its end.
    pub on_consumed: C,
}

/// Waits for records until `stop`, with `on_tick` about every [`TICK`],
/// then drains the rest; `false` when it had to give up first.
fn run(
    ring: &RingBuffer<'static>,
    stop: &AtomicBool,
    on_tick: &mut dyn FnMut(),
    on_consumed: &mut dyn FnMut(),
) -> bool {
    let mut ticked = Instant::now();
    // The kernel wakes the consumer only once KSPAN_WAKEUP_BYTES wait (a
    // wakeup per record would tax every traced call); the timeout collects a
    // quieter trickle.
    while !stop.load(Ordering::Relaxed) {
        let polled = ring.poll(CONSUMER_POLL).and_then(|()| ring.consume());
        if let Err(e) = polled {
            // Not expected of an epoll descriptor; said loudly, and the
            // runtime reports the consumer as dead.
            crate::diagnostics::error_user!(error = %e, "kspan stops consuming its ring buffer");
            return false;
        }
        on_consumed();
        if ticked.elapsed() >= TICK {
            on_tick();
            ticked = Instant::now();
        }
    }
    // Whatever the kernel wrote before the links went away.
    if let Err(e) = ring.consume() {
        crate::diagnostics::error_user!(error = %e, "kspan ring buffer consume failed");
    }
    on_consumed();
    true
}

/// How often the consumer's `on_tick` runs, at least (slower only while a
/// batch of records takes longer).
pub(crate) const TICK: std::time::Duration = std::time::Duration::from_secs(1);

/// How long a record may wait in the ring buffer when fewer than
/// `KSPAN_WAKEUP_BYTES` are waiting (documented with `Kspan`).
const CONSUMER_POLL: std::time::Duration = std::time::Duration::from_millis(50);
