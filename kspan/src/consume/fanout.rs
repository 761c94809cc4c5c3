// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Records shared out to worker threads, by the thread that made them.
//!
//! One consumer thread reads the ring buffer; building spans and handing
//! them to the application's processors is what costs (the SDK's span, the
//! handler, the batch processor's queue), so that is what runs on several
//! threads. A record goes to the worker of its thread id (`tid % workers`):
//! every record of one thread goes to one worker, in the order the kernel
//! wrote them, so a tree's spans and the records that settle their parents
//! (`held`) meet where they are turned into spans, as with one consumer.
//!
//! Records are copied into batches (8-byte aligned, as the ring keeps them,
//! so headers are still read in place) and a batch goes to its worker when
//! it is full or the ring has been drained for now. Channels are bounded: a
//! worker that falls behind holds the reader, the ring fills, and the
//! kernel declines calls and counts them, as it does for one consumer. Used
//! batches come back for reuse.

use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread::JoinHandle;

use kspan_bpf::types::kspan_record;

/// Bytes of records a batch gathers before it goes to its worker.
const BATCH_BYTES: usize = 64 * 1024;

/// Batches on their way to one worker, at most: with a full batch each,
/// about 256 KiB a worker, against a ring of 4 MiB by default.
const BATCHES_IN_FLIGHT: usize = 4;

/// Records copied out of the ring, each after a word of its length and
/// padded to 8 bytes.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    words: Vec<u64>,
}

impl Batch {
    fn push(&mut self, record: &[u8]) {
        self.words.push(record.len() as u64);
        let start = self.words.len();
        self.words.resize(start + record.len().div_ceil(8), 0);
        // SAFETY: `words[start..]` is `record.len().div_ceil(8)` initialised
        // u64s, at least `record.len()` bytes, and a u64 slice may be
        // viewed as bytes (u8 has no alignment or validity requirement).
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(
                self.words[start..].as_mut_ptr().cast::<u8>(),
                record.len(),
            )
        };
        bytes.copy_from_slice(record);
    }

    fn bytes(&self) -> usize {
        self.words.len() * 8
    }

    fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// Each record, 8-byte aligned.
    pub(crate) fn records(&self) -> impl Iterator<Item = &[u8]> {
        let mut at = 0;
        std::iter::from_fn(move || {
            let len = usize::try_from(*self.words.get(at)?).ok()?;
            let start = at + 1;
            let end = start + len.div_ceil(8);
            let words = self.words.get(start..end)?;
            at = end;
            // SAFETY: `words` holds `len.div_ceil(8) * 8 >= len` bytes,
            // borrowed from `self`; a u64 slice may be viewed as bytes.
            Some(unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), len) })
        })
    }

    fn clear(&mut self) {
        self.words.clear();
    }
}

/// A worker's end: batches to turn into spans, and where used ones go back.
pub(crate) struct WorkerEnd {
    batches: Receiver<Batch>,
    used: SyncSender<Batch>,
}

impl WorkerEnd {
    /// Runs `on_record` on every record of every batch until the reader
    /// is done.
    pub(crate) fn run(self, mut on_record: impl FnMut(&[u8])) {
        for mut batch in self.batches {
            for record in batch.records() {
                on_record(record);
            }
            batch.clear();
            // The reader may have more than it can hold; then it makes more.
            let _ = self.used.try_send(batch);
        }
    }
}

/// The reader's end: a batch gathering for each worker, sent when full or
/// at [`Fanout::flush`].
pub(crate) struct Fanout {
    workers: Vec<Worker>,
    used: Receiver<Batch>,
    /// A worker that died, said at the next flush: the ring's callback,
    /// where records are pushed, is called from C and must not panic.
    died: Option<WorkerDied>,
}

struct Worker {
    batches: Option<SyncSender<Batch>>,
    gathering: Batch,
    thread: Option<JoinHandle<()>>,
}

/// Why records could not be handed to a worker: it died (its thread
/// panicked), with what it said.
#[derive(Debug)]
pub(crate) struct WorkerDied(pub(crate) String);

impl Fanout {
    /// `workers` threads, each started by `spawn` with its end; `Err` when
    /// a thread cannot be started (those started stop again).
    pub(crate) fn start(
        workers: usize,
        mut spawn: impl FnMut(usize, WorkerEnd) -> std::io::Result<JoinHandle<()>>,
    ) -> std::io::Result<Fanout> {
        let (used_tx, used) = mpsc::sync_channel(workers * (BATCHES_IN_FLIGHT + 2));
        let mut fanout = Fanout {
            workers: Vec::with_capacity(workers),
            used,
            died: None,
        };
        for i in 0..workers.max(1) {
            let (tx, rx) = mpsc::sync_channel(BATCHES_IN_FLIGHT);
            let end = WorkerEnd {
                batches: rx,
                used: used_tx.clone(),
            };
            let thread = spawn(i, end)?;
            fanout.workers.push(Worker {
                batches: Some(tx),
                gathering: Batch::default(),
                thread: Some(thread),
            });
        }
        Ok(fanout)
    }

    /// Adds `record` to its worker's batch (by the thread id in its
    /// header; a record too short for one goes to the first worker, which
    /// counts it as undecodable). Once a worker died, records go nowhere:
    /// the next [`Self::flush`] says so, and the consumer ends.
    pub(crate) fn push(&mut self, record: &[u8]) {
        if self.died.is_some() {
            return;
        }
        let n = self.workers.len();
        let i = thread_id(record).map_or(0, |tid| tid as usize % n);
        let worker = &mut self.workers[i];
        worker.gathering.push(record);
        if worker.gathering.bytes() >= BATCH_BYTES {
            if let Err(died) = self.send(i) {
                self.died = Some(died);
            }
        }
    }

    /// Sends every batch gathered so far; `Err` once a worker died.
    pub(crate) fn flush(&mut self) -> Result<(), WorkerDied> {
        if let Some(died) = self.died.take() {
            return Err(died);
        }
        for i in 0..self.workers.len() {
            if !self.workers[i].gathering.is_empty() {
                self.send(i)?;
            }
        }
        Ok(())
    }

    /// Sends what is gathered, closes every worker's channel and waits for
    /// the workers to finish what they hold.
    pub(crate) fn finish(&mut self) -> Result<(), WorkerDied> {
        let flushed = self.flush();
        let mut died = flushed.err();
        for w in &mut self.workers {
            w.batches = None;
        }
        for w in &mut self.workers {
            if let Some(Err(panic)) = w.thread.take().map(JoinHandle::join) {
                died.get_or_insert(WorkerDied(panic_message(&*panic)));
            }
        }
        died.map_or(Ok(()), Err)
    }

    fn send(&mut self, i: usize) -> Result<(), WorkerDied> {
        let fresh = self.used.try_recv().unwrap_or_default();
        let worker = &mut self.workers[i];
        let batch = std::mem::replace(&mut worker.gathering, fresh);
        let sent = match &worker.batches {
            Some(tx) => tx.send(batch).is_ok(),
            None => false,
        };
        if sent {
            return Ok(());
        }
        // Its receiver is gone: the worker's thread ended, by a panic.
        worker.batches = None;
        let said = match worker.thread.take().map(JoinHandle::join) {
            Some(Err(panic)) => panic_message(&*panic),
            _ => "a span worker stopped".to_owned(),
        };
        Err(WorkerDied(said))
    }
}

impl Drop for Fanout {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// The thread id of a record's header, if it holds one.
fn thread_id(record: &[u8]) -> Option<u32> {
    let at = std::mem::offset_of!(kspan_record, tid);
    let bytes = record.get(at..at + 4)?;
    Some(u32::from_ne_bytes(bytes.try_into().ok()?))
}

/// What a panic said, when it said it as text.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "the consumer thread panicked".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    fn record(tid: u32, fill: u8, len: usize) -> Vec<u8> {
        let mut r = vec![fill; len.max(std::mem::size_of::<kspan_record>())];
        let at = std::mem::offset_of!(kspan_record, tid);
        r[at..at + 4].copy_from_slice(&tid.to_ne_bytes());
        r
    }

    #[test]
    fn a_batch_keeps_records_whole_and_aligned() {
        let mut b = Batch::default();
        let records = [vec![1u8; 1], vec![2; 8], vec![3; 13], vec![], vec![5; 200]];
        for r in &records {
            b.push(r);
        }
        let got: Vec<&[u8]> = b.records().collect();
        assert_eq!(got.len(), records.len());
        for (g, r) in got.iter().zip(&records) {
            assert_eq!(*g, &r[..]);
            assert_eq!(g.as_ptr() as usize % 8, 0);
        }
        b.clear();
        assert_eq!(b.records().count(), 0);
    }

    /// Per worker, the (thread id, fill byte) of each record it was given.
    type Seen = Vec<Vec<(u32, u8)>>;

    /// Runs `records` through `workers` workers that note each record's
    /// fill byte under their index.
    fn fan(workers: usize, records: &[Vec<u8>]) -> Seen {
        let seen: Arc<Mutex<Seen>> = Arc::new(Mutex::new(vec![vec![]; workers]));
        let mut f = Fanout::start(workers, |i, end| {
            let seen = seen.clone();
            std::thread::Builder::new().spawn(move || {
                end.run(|r| {
                    let tid = thread_id(r).unwrap();
                    seen.lock().unwrap()[i].push((tid, r[r.len() - 1]));
                });
            })
        })
        .unwrap();
        for (n, r) in records.iter().enumerate() {
            f.push(r);
            if n % 7 == 0 {
                f.flush().unwrap();
            }
        }
        f.finish().unwrap();
        let seen = seen.lock().unwrap().clone();
        seen
    }

    #[test]
    fn each_thread_s_records_go_to_one_worker_in_order() {
        // Enough to fill batches several times over.
        let records: Vec<Vec<u8>> = (0..20_000u32)
            .map(|n| record(n % 13, (n / 13 % 251) as u8, 152 + (n as usize % 40)))
            .collect();
        let seen = fan(3, &records);
        assert_eq!(seen.iter().map(Vec::len).sum::<usize>(), records.len());
        for (i, got) in seen.iter().enumerate() {
            assert!(got.iter().all(|(tid, _)| *tid as usize % 3 == i));
            for tid in (0..13).filter(|t| t % 3 == i as u32) {
                let fills: Vec<u8> = got
                    .iter()
                    .filter(|(t, _)| *t == tid)
                    .map(|(_, f)| *f)
                    .collect();
                let want: Vec<u8> = (0..20_000u32)
                    .filter(|n| n % 13 == tid)
                    .map(|n| (n / 13 % 251) as u8)
                    .collect();
                assert_eq!(fills, want, "thread {tid}'s records out of order");
            }
        }
    }

    #[test]
    fn a_worker_that_panics_is_said_with_its_message() {
        let mut f = Fanout::start(2, |_, end| {
            std::thread::Builder::new().spawn(move || {
                end.run(|r| {
                    if thread_id(r) == Some(1) {
                        panic!("a processor panicked");
                    }
                });
            })
        })
        .unwrap();
        f.push(&record(1, 0, 0));
        let mut died = f.flush().err();
        // The worker may die after the flush: a later flush, or the
        // finish, says it.
        for _ in 0..100 {
            if died.is_some() {
                break;
            }
            f.push(&record(1, 0, 200_000));
            died = f.flush().err();
        }
        let died = died.or_else(|| f.finish().err()).expect("the death said");
        assert_eq!(died.0, "a processor panicked");
    }
}
