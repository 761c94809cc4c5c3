// SPDX-License-Identifier: Apache-2.0 OR MIT
//! What the kernel summed for one application span, read through the
//! generated `struct kspan_sched_sum`, and the attributes it makes.

use std::sync::Arc;

use kspan_bpf::consts as c;
use kspan_bpf::types::kspan_sched_sum;
use opentelemetry::KeyValue;

use super::keys::{attributes, cause_attributes};
use crate::bpf::counters::MappedCounters;
use crate::bpf::maps::AccountMaps;
use crate::bpf::span_table::SpanTable;
use crate::bpf::MapError;
use crate::sums::SpanEndFigures;

/// What the kernel summed for one application span: its
/// `struct kspan_sched_sum`, the generated type, field for field (the
/// figures' meanings are in `kspan.h`).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SchedTotals(kspan_sched_sum);

impl std::ops::Deref for SchedTotals {
    type Target = kspan_sched_sum;

    fn deref(&self) -> &kspan_sched_sum {
        &self.0
    }
}

impl std::ops::DerefMut for SchedTotals {
    fn deref_mut(&mut self) -> &mut kspan_sched_sum {
        &mut self.0
    }
}

impl SchedTotals {
    /// From the kernel's words: the table's value (`struct kspan_sched_sum`),
    /// read as the generated type, short words as 0.
    pub(crate) fn from_words(words: &[u64]) -> Self {
        let mut sum = kspan_sched_sum::default();
        let n = words.len().min(std::mem::size_of::<kspan_sched_sum>() / 8);
        // SAFETY: the generated type is `repr(C)` and made of u64s and
        // arrays of u64 only (every bit pattern valid, no padding); at most
        // its size in whole words is copied into it.
        unsafe {
            std::ptr::copy_nonoverlapping(
                words.as_ptr(),
                std::ptr::addr_of_mut!(sum).cast::<u64>(),
                n,
            );
        }
        SchedTotals(sum)
    }

    /// Off CPU in total, run queue included.
    pub(crate) fn off_cpu_ns(&self) -> u64 {
        self.run_queue_ns + self.sleeping_ns + self.blocked_ns + self.other_ns
    }

    /// The span's attributes, given how long it was current (`current_ns`):
    /// on a CPU is that less the time off CPU (never below 0: the two
    /// clocks are read a few hundred ns apart at each switch) and less the
    /// interrupt time the kernel left out of its threads' CPU time (where
    /// it accounts it apart: then said, as much of it as the span's time
    /// holds), and, when intervals were missed, how many and by how much
    /// the figures may be off; with `causes`, the splits by cause
    /// ([`cause_attributes`]).
    pub(crate) fn attributes(&self, current_ns: u64, causes: bool) -> Vec<KeyValue> {
        let current = current_ns.max(self.off_cpu_ns());
        let interrupts = self.irq_ns.min(current - self.off_cpu_ns());
        let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let mut attrs = vec![
            KeyValue::new(
                attributes::ON_CPU_NS,
                n(current - self.off_cpu_ns() - interrupts),
            ),
            KeyValue::new(attributes::RUN_QUEUE_NS, n(self.run_queue_ns)),
            KeyValue::new(attributes::BLOCKED_NS, n(self.blocked_ns)),
            KeyValue::new(attributes::SLEEPING_NS, n(self.sleeping_ns)),
            KeyValue::new(attributes::OTHER_OFF_CPU_NS, n(self.other_ns)),
            KeyValue::new(attributes::CURRENT_NS, n(current)),
            KeyValue::new(attributes::VOLUNTARY_SWITCHES, n(self.voluntary)),
            KeyValue::new(attributes::INVOLUNTARY_SWITCHES, n(self.involuntary)),
            KeyValue::new(attributes::WAITS, n(self.waits)),
        ];
        if self.intervals_missed > 0 {
            attrs.push(KeyValue::new(
                attributes::INTERVALS_MISSED,
                n(self.intervals_missed),
            ));
            attrs.push(KeyValue::new(attributes::MISSED_NS, n(self.missed_ns)));
        }
        if interrupts > 0 {
            attrs.push(KeyValue::new(attributes::INTERRUPTS_NS, n(interrupts)));
        }
        if causes {
            self.cause_attributes(&mut attrs);
        }
        attrs
    }

    /// The splits by cause, each with its remainder: those not 0 only (a
    /// cause attribute left out is 0; most spans have few causes, and each
    /// attribute costs the span its copies down the pipeline).
    fn cause_attributes(&self, attrs: &mut Vec<KeyValue>) {
        use cause_attributes as a;
        let blocked_parts = self.blocked_io_ns + self.blocked_memory_ns + self.blocked_lock_ns;
        let sleeping_parts = self.sleeping_lock_ns
            + self.sleeping_futex_ns
            + self.sleeping_poll_ns
            + self.sleeping_timer_ns
            + self.sleeping_receive_ns;
        let mut put = |key: &'static str, v: u64| {
            if v != 0 {
                attrs.push(KeyValue::new(key, i64::try_from(v).unwrap_or(i64::MAX)));
            }
        };
        put(a::BLOCKED_IO_NS, self.blocked_io_ns);
        put(a::BLOCKED_MEMORY_NS, self.blocked_memory_ns);
        put(a::BLOCKED_LOCK_NS, self.blocked_lock_ns);
        put(
            a::BLOCKED_UNATTRIBUTED_NS,
            self.blocked_ns.saturating_sub(blocked_parts),
        );
        put(a::SLEEPING_LOCK_NS, self.sleeping_lock_ns);
        put(a::SLEEPING_FUTEX_NS, self.sleeping_futex_ns);
        put(a::SLEEPING_POLL_NS, self.sleeping_poll_ns);
        put(a::SLEEPING_TIMER_NS, self.sleeping_timer_ns);
        put(a::SLEEPING_RECEIVE_NS, self.sleeping_receive_ns);
        put(
            a::SLEEPING_UNATTRIBUTED_NS,
            self.sleeping_ns.saturating_sub(sleeping_parts),
        );
        let kinds = [
            (a::LOCK_MUTEX_NS, a::LOCK_MUTEX_COUNT),
            (a::LOCK_RWSEM_NS, a::LOCK_RWSEM_COUNT),
            (a::LOCK_SPIN_NS, a::LOCK_SPIN_COUNT),
            (a::LOCK_OTHER_NS, a::LOCK_OTHER_COUNT),
        ];
        for (i, (ns, count)) in kinds.into_iter().enumerate() {
            put(ns, self.lock_ns[i]);
            put(count, self.locks[i]);
        }
        put(a::MEMORY_RECLAIM_NS, self.memory_ns[0]);
        put(a::MEMORY_RECLAIMS, self.memory_stalls[0]);
        put(a::MEMORY_COMPACTION_NS, self.memory_ns[1]);
        put(a::MEMORY_COMPACTIONS, self.memory_stalls[1]);
        let total = |rows: &[u64; 3]| rows.iter().sum();
        put(a::BLOCK_REQUESTS, total(&self.block_requests));
        put(a::BLOCK_BYTES, total(&self.block_bytes));
        put(a::BLOCK_QUEUE_NS, total(&self.block_queue_ns));
        put(a::BLOCK_DEVICE_NS, total(&self.block_device_ns));
        put(a::BLOCK_HELD_REQUESTS, total(&self.block_held));
        put(a::BLOCK_HELD_NS, total(&self.block_held_ns));
        let rows: Vec<String> = (0..3)
            .filter(|&row| self.block_requests[row] > 0)
            .map(|row| {
                let device = match self.block_dev.get(row) {
                    Some(&dev) => crate::kernel::block::device_name(dev),
                    None => "other devices".to_owned(),
                };
                let held = match self.block_held[row] {
                    0 => String::new(),
                    held => format!(
                        " ({held} held by the throttle {} ns before)",
                        self.block_held_ns[row]
                    ),
                };
                format!(
                    "{device}: {} requests, {} bytes, queued {} ns, on the device {} ns{held}",
                    self.block_requests[row],
                    self.block_bytes[row],
                    self.block_queue_ns[row],
                    self.block_device_ns[row]
                )
            })
            .collect();
        if !rows.is_empty() {
            let rows: Vec<opentelemetry::StringValue> = rows.into_iter().map(Into::into).collect();
            attrs.push(KeyValue::new(
                a::BLOCK_BY_DEVICE,
                opentelemetry::Value::Array(rows.into()),
            ));
        }
    }
}

/// The account's figures of each application span as it ends: the
/// kernel's totals (its table by span id), the time the span was current
/// ([`super::time`]), an interval the kernel has not closed yet, and with
/// the causes the page faults. Handed to [`KernelSums`](crate::KernelSums)
/// at start.
pub(crate) struct SpanFigures {
    table: SpanTable,
    /// Each thread's open off-CPU interval (`kspan_sched_open`), shared
    /// with the time base, which reads its `faults` words.
    open: Arc<MappedCounters>,
    /// The causes are read: their attributes go on the spans.
    causes: bool,
}

impl SpanFigures {
    /// Over the account's tables in `maps`.
    pub(crate) fn new(maps: &AccountMaps, causes: bool) -> Result<Self, MapError> {
        Ok(SpanFigures {
            table: SpanTable::new(&maps.spans, kspan_bpf::names::SCHED_SPANS_MAP)?,
            open: Arc::new(MappedCounters::new(
                &maps.open,
                kspan_bpf::names::SCHED_OPEN_MAP,
            )?),
            causes,
        })
    }

    /// `kspan_sched_open`, mapped, for the time base to read the `faults`
    /// words of.
    pub(crate) fn open_slots(&self) -> Arc<MappedCounters> {
        Arc::clone(&self.open)
    }

    /// An off-CPU interval of `span` on the calling thread whose switch-in
    /// the kernel did not report (the thread runs, yet its interval is
    /// open), claimed so that the kernel counts it in `Stats` only: the
    /// time from its switch-out to now.
    fn missed_here(&self, span: u64) -> Option<u64> {
        const WORDS: usize = std::mem::size_of::<kspan_bpf::types::kspan_sched_open>() / 8;
        let tid = u64::from(crate::context::current_tid());
        let at = (tid as usize & (c::KSPAN_SCHED_OPEN_SLOTS as usize - 1)) * WORDS;
        let out = self.open.word(at + 1);
        if self.open.word(at) != tid
            || self.open.word(at + 2) != span
            || out == 0
            || out & c::KSPAN_SCHED_OPEN_CLAIMED != 0
        {
            return None;
        }
        // Claimed only if it is still that interval (a switch-out since
        // would have written another).
        self.open
            .compare_exchange(at + 1, out, out | c::KSPAN_SCHED_OPEN_CLAIMED)
            .then(|| super::time::monotonic_ns().saturating_sub(out))
    }
}

/// The account's tag in its table (`kspan_sched_sum_of`).
const SCHED_TAG: u64 = 1;

impl SpanEndFigures for SpanFigures {
    fn take(&self, span: u64, attributes: &mut Vec<KeyValue>) {
        let current = super::time::take(span);
        let mut totals = self
            .table
            .take(span, SCHED_TAG)
            .map(|words| SchedTotals::from_words(&words));
        if let Some(missed_ns) = self.missed_here(span) {
            let t = totals.get_or_insert_with(SchedTotals::default);
            t.intervals_missed += 1;
            t.missed_ns += missed_ns;
        }
        if current.ns == 0 && totals.is_none() {
            return;
        }
        let totals = totals.unwrap_or_default();
        attributes.extend(totals.attributes(current.ns, self.causes));
        if self.causes {
            attributes.extend(fault_attributes(
                current.minor_faults,
                current.major_faults,
                totals.fault_ns,
            ));
        }
    }
}

/// The page fault attributes of a span not 0 (as the other causes'): the
/// kernel's counts of its time current, and its time off CPU in faults.
fn fault_attributes(minor: u64, major: u64, wait_ns: u64) -> impl Iterator<Item = KeyValue> {
    [
        (cause_attributes::FAULTS_MINOR, minor),
        (cause_attributes::FAULTS_MAJOR, major),
        (cause_attributes::FAULT_WAIT_NS, wait_ns),
    ]
    .into_iter()
    .filter(|&(_, v)| v != 0)
    .map(|(key, v)| KeyValue::new(key, i64::try_from(v).unwrap_or(i64::MAX)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_cpu_is_the_current_time_less_the_off_cpu_time() {
        let totals = SchedTotals(kspan_sched_sum {
            run_queue_ns: 5,
            sleeping_ns: 50,
            blocked_ns: 20,
            other_ns: 0,
            voluntary: 3,
            involuntary: 1,
            waits: 2,
            blocked_io_ns: 12,
            blocked_memory_ns: 3,
            blocked_lock_ns: 1,
            sleeping_futex_ns: 30,
            sleeping_timer_ns: 15,
            lock_ns: [7, 0, 0, 0],
            locks: [1, 2, 0, 0],
            ..kspan_sched_sum::default()
        });
        let attrs = totals.attributes(100, true);
        let value = |attrs: &[KeyValue], key: &str| {
            attrs
                .iter()
                .find(|kv| kv.key.as_str() == key)
                .map(|kv| kv.value.clone())
        };
        let int = |v: i64| Some(opentelemetry::Value::I64(v));
        assert_eq!(value(&attrs, attributes::ON_CPU_NS), int(25));
        assert_eq!(value(&attrs, attributes::CURRENT_NS), int(100));
        // Blocked and sleeping by cause: the rest of each unattributed.
        assert_eq!(value(&attrs, cause_attributes::BLOCKED_IO_NS), int(12));
        assert_eq!(value(&attrs, cause_attributes::BLOCKED_MEMORY_NS), int(3));
        assert_eq!(value(&attrs, cause_attributes::BLOCKED_LOCK_NS), int(1));
        assert_eq!(
            value(&attrs, cause_attributes::BLOCKED_UNATTRIBUTED_NS),
            int(4)
        );
        assert_eq!(value(&attrs, cause_attributes::SLEEPING_FUTEX_NS), int(30));
        assert_eq!(value(&attrs, cause_attributes::SLEEPING_TIMER_NS), int(15));
        assert_eq!(
            value(&attrs, cause_attributes::SLEEPING_UNATTRIBUTED_NS),
            int(5)
        );
        assert_eq!(value(&attrs, cause_attributes::LOCK_MUTEX_NS), int(7));
        assert_eq!(value(&attrs, cause_attributes::LOCK_RWSEM_COUNT), int(2));
        // A current time below the off-CPU time (clock skew) is raised to it.
        assert_eq!(
            value(&totals.attributes(60, true), attributes::ON_CPU_NS),
            int(0)
        );
        // No interval missed: no word of it; the causes off: none of them.
        // Of the causes, those not 0 only: blocked by io, memory, lock and
        // the rest, sleeping by futex, timer and the rest, the mutex's time
        // and count and the rwsem's count. No block request: no line by
        // device.
        assert_eq!(attrs.len(), 9 + 4 + 3 + 3, "{attrs:#?}");
        for absent in [
            cause_attributes::SLEEPING_LOCK_NS,
            cause_attributes::SLEEPING_POLL_NS,
            cause_attributes::SLEEPING_RECEIVE_NS,
            cause_attributes::LOCK_RWSEM_NS,
            cause_attributes::LOCK_SPIN_COUNT,
            cause_attributes::MEMORY_RECLAIM_NS,
            cause_attributes::BLOCK_REQUESTS,
            cause_attributes::BLOCK_BY_DEVICE,
        ] {
            assert_eq!(value(&attrs, absent), None, "{absent}");
        }
        assert_eq!(totals.attributes(100, false).len(), 9);
        let missed = SchedTotals(kspan_sched_sum {
            intervals_missed: 1,
            missed_ns: 30,
            ..*totals
        });
        let attrs = missed.attributes(100, false);
        let get = |k: &str| {
            attrs
                .iter()
                .find(|kv| kv.key.as_str() == k)
                .map(|kv| kv.value.clone())
        };
        assert_eq!(
            get(attributes::INTERVALS_MISSED),
            Some(opentelemetry::Value::I64(1))
        );
        assert_eq!(
            get(attributes::MISSED_NS),
            Some(opentelemetry::Value::I64(30))
        );
        assert_eq!(get(attributes::INTERRUPTS_NS), None);
    }

    #[test]
    fn interrupt_time_the_kernel_left_out_is_out_of_on_cpu_time() {
        let totals = SchedTotals(kspan_sched_sum {
            run_queue_ns: 5,
            sleeping_ns: 50,
            irq_ns: 7,
            ..kspan_sched_sum::default()
        });
        let get = |attrs: &[KeyValue], k: &str| {
            attrs
                .iter()
                .find(|kv| kv.key.as_str() == k)
                .map(|kv| kv.value.clone())
        };
        let int = |v: i64| Some(opentelemetry::Value::I64(v));
        let attrs = totals.attributes(100, false);
        assert_eq!(get(&attrs, attributes::ON_CPU_NS), int(38));
        assert_eq!(get(&attrs, attributes::INTERRUPTS_NS), int(7));
        // Never more than the span's time on a CPU holds.
        let attrs = totals.attributes(59, false);
        assert_eq!(get(&attrs, attributes::ON_CPU_NS), int(0));
        assert_eq!(get(&attrs, attributes::INTERRUPTS_NS), int(4));
    }

    #[test]
    fn totals_read_the_kernel_layout() {
        let words: Vec<u64> = (1u64..=51).collect();
        let t = SchedTotals::from_words(&words);
        assert_eq!((t.run_queue_ns, t.waits), (1, 7));
        assert_eq!((t.intervals_missed, t.missed_ns), (8, 9));
        assert_eq!((t.blocked_io_ns, t.blocked_memory_ns), (10, 11));
        assert_eq!((t.blocked_lock_ns, t.sleeping_lock_ns), (12, 13));
        assert_eq!((t.sleeping_futex_ns, t.sleeping_receive_ns), (14, 17));
        assert_eq!((t.lock_ns, t.locks), ([18, 19, 20, 21], [22, 23, 24, 25]));
        assert_eq!(t.block_dev, [26, 27]);
        assert_eq!(t.irq_ns, 51);
        assert_eq!(
            (t.block_requests, t.block_device_ns),
            ([28, 29, 30], [37, 38, 39])
        );
        assert_eq!(
            (t.block_held, t.block_held_ns),
            ([40, 41, 42], [43, 44, 45])
        );
        assert_eq!((t.fault_ns, t.memory_stalls), (46, [49, 50]));
        assert_eq!(
            std::mem::size_of::<kspan_bpf::types::kspan_sched_sum>(),
            words.len() * 8
        );
        // The slot: the span id and the tag, then the totals.
        assert_eq!(
            std::mem::size_of::<kspan_bpf::types::kspan_sched_slot>(),
            16 + words.len() * 8
        );
    }
}
