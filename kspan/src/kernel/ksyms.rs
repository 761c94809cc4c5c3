// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Kernel text addresses to function names, from `/proc/kallsyms`: the
//! stacks of wait spans. Read once, when kspan starts with wait spans on
//! (about 120,000 lines: the kernel takes tens of milliseconds to print
//! them), so no request's wait pays for it on the consumer's thread. The
//! names are kept in one string, each symbol an address and a range of
//! it: one allocation for the names, not one per symbol.

use std::io::{self, BufRead, Read};

/// The kernel's text symbols, and its data symbols (where kallsyms lists
/// them: `CONFIG_KALLSYMS_ALL`), each sorted by address.
#[derive(Debug, Default)]
pub struct KernelSymbolTable {
    names: String,
    /// Address, and the name's start and end in `names`.
    symbols: Vec<(u64, u32, u32)>,
    /// The same, of data and bss symbols (a static lock's name).
    data: Vec<(u64, u32, u32)>,
}

/// How far past a data symbol's start an address is still taken to be in
/// it (kallsyms gives no sizes): a lock inside a static structure.
const DATA_SYMBOL_REACH: u64 = 4096;

impl KernelSymbolTable {
    /// Reads `/proc/kallsyms`. Where the kernel hides addresses from this
    /// process (`kptr_restrict`, no CAP_SYSLOG) every address reads 0 and
    /// the table is empty: stacks then show addresses.
    pub fn load() -> io::Result<Self> {
        let mut text = String::new();
        std::fs::File::open("/proc/kallsyms")?.read_to_string(&mut text)?;
        Ok(Self::parse_str(&text))
    }

    /// Parses lines of `/proc/kallsyms` (`address type name [module]`),
    /// keeping the text symbols (`t`, `T`) and the data ones (`d`, `D`,
    /// `b`, `B`).
    pub fn parse(mut lines: impl BufRead) -> Self {
        let mut text = String::new();
        match lines.read_to_string(&mut text) {
            Ok(_) => Self::parse_str(&text),
            Err(_) => Self::default(),
        }
    }

    fn parse_str(text: &str) -> Self {
        let mut table = KernelSymbolTable::default();
        for line in text.lines() {
            let mut fields = line.split_ascii_whitespace();
            let (Some(address), Some(kind), Some(name)) =
                (fields.next(), fields.next(), fields.next())
            else {
                continue;
            };
            let text = matches!(kind, "t" | "T");
            if !text && !matches!(kind, "d" | "D" | "b" | "B") {
                continue;
            }
            let Ok(address) = u64::from_str_radix(address, 16) else {
                continue;
            };
            if address == 0 {
                continue;
            }
            let (Ok(start), Ok(end)) = (
                u32::try_from(table.names.len()),
                u32::try_from(table.names.len() + name.len()),
            ) else {
                break;
            };
            table.names.push_str(name);
            if text {
                table.symbols.push((address, start, end));
            } else {
                table.data.push((address, start, end));
            }
        }
        table.symbols.sort_unstable_by_key(|&(address, ..)| address);
        table.data.sort_unstable_by_key(|&(address, ..)| address);
        table
    }

    /// The data symbol `address` is, or is in (within 4 KiB of its start),
    /// as `name` or `name+0x<offset>`: a static object's. An address in
    /// allocated memory (the kernel's heap lies below its image) has none.
    pub fn data_name_of(&self, address: u64) -> Option<String> {
        let at = self.data.partition_point(|&(a, ..)| a <= address);
        let &(start_address, start, end) = self.data.get(at.checked_sub(1)?)?;
        let offset = address - start_address;
        if offset >= DATA_SYMBOL_REACH {
            return None;
        }
        let name = self.names.get(start as usize..end as usize)?;
        Some(if offset == 0 {
            name.to_owned()
        } else {
            format!("{name}+{offset:#x}")
        })
    }

    /// The function `address` is in (the nearest symbol at or below it).
    pub fn name_of(&self, address: u64) -> Option<&str> {
        let at = self.symbols.partition_point(|&(a, ..)| a <= address);
        let &(_, start, end) = self.symbols.get(at.checked_sub(1)?)?;
        self.names.get(start as usize..end as usize)
    }

    /// Whether the table knows any symbol.
    pub fn is_empty(&self) -> bool {
        self.symbols.is_empty()
    }
}

/// Frames of the scheduler itself and of the tracing path, left out at the
/// top of a wait's stack: the frames below them say why the thread waited.
pub fn is_scheduler_frame(name: &str) -> bool {
    matches!(
        name,
        "__schedule" | "schedule" | "preempt_schedule_common" | "__cond_resched"
    ) || [
        "__switch_to",
        "__traceiter_",
        "__bpf_trace_",
        "bpf_",
        "perf_",
        "trace_call_bpf",
        "preempt_schedule",
        "__perf",
    ]
    .iter()
    .any(|prefix| name.starts_with(prefix))
}

/// Frames that only an interrupt's stack has (hard interrupt and softirq
/// entries, the timer and IPI paths, NMIs): a wake-up whose stack holds one
/// was made by the interrupt, not by the task it interrupted.
pub fn is_interrupt_frame(name: &str) -> bool {
    [
        "asm_sysvec_",
        "asm_common_interrupt",
        "common_interrupt",
        "sysvec_",
        "__sysvec_",
        "handle_softirqs",
        "__do_softirq",
        "do_softirq",
        "__irq_exit_rcu",
        "irq_exit",
        "hrtimer_interrupt",
        "__hrtimer_run_queues",
        "handle_irq_event",
        "asm_exc_nmi",
        "exc_nmi",
        "default_do_nmi",
        "flush_smp_call_function",
        "__flush_smp_call_function",
    ]
    .iter()
    .any(|prefix| name.starts_with(prefix))
}

/// Whether any of `frames` is an interrupt's ([`is_interrupt_frame`]).
pub fn in_interrupt(table: &KernelSymbolTable, frames: &[u64]) -> bool {
    frames
        .iter()
        .filter_map(|&a| table.name_of(a))
        .any(is_interrupt_frame)
}

/// The stack `frames` (innermost first) as `a <- b <- c`: scheduler frames
/// at the top left out, at most `keep` frames, unknown addresses in hex.
pub fn render_stack(table: &KernelSymbolTable, frames: &[u64], keep: usize) -> String {
    let names = frames
        .iter()
        .filter(|&&a| a != 0)
        .map(|&a| match table.name_of(a) {
            Some(name) => name.to_owned(),
            None => format!("{a:#x}"),
        });
    let mut top = true;
    names
        .filter(|name| {
            if top && (is_scheduler_frame(name) || name.starts_with("0x")) {
                return false;
            }
            top = false;
            true
        })
        .take(keep)
        .collect::<Vec<_>>()
        .join(" <- ")
}

#[cfg(test)]
mod properties;

#[cfg(test)]
mod tests {
    use super::*;

    const KALLSYMS: &str = "\
ffffffff81000000 T _stext
ffffffff81100000 t __schedule
ffffffff81100800 T schedule
ffffffff81200000 T do_nanosleep
ffffffff81200400 T hrtimer_nanosleep
ffffffff81300000 D some_data
ffffffff81400000 T __x64_sys_clock_nanosleep
";

    #[test]
    fn addresses_resolve_to_the_function_they_fall_in() {
        let table = KernelSymbolTable::parse(KALLSYMS.as_bytes());
        assert_eq!(table.name_of(0xffffffff81200010), Some("do_nanosleep"));
        assert_eq!(table.name_of(0xffffffff81100900), Some("schedule"));
        // Data symbols are not functions.
        assert_eq!(table.name_of(0xffffffff81300010), Some("hrtimer_nanosleep"));
        assert_eq!(table.name_of(0x1000), None);
    }

    #[test]
    fn a_static_lock_is_named_by_its_data_symbol() {
        let table = KernelSymbolTable::parse(KALLSYMS.as_bytes());
        assert_eq!(
            table.data_name_of(0xffffffff81300000).as_deref(),
            Some("some_data")
        );
        assert_eq!(
            table.data_name_of(0xffffffff81300010).as_deref(),
            Some("some_data+0x10")
        );
        // Past its reach, or in the heap below the image: no name.
        assert_eq!(table.data_name_of(0xffffffff81301000), None);
        assert_eq!(table.data_name_of(0xffff888100000000), None);
    }

    #[test]
    fn a_stack_leaves_out_the_scheduler_at_its_top() {
        let table = KernelSymbolTable::parse(KALLSYMS.as_bytes());
        let frames = [
            0xffffffff81100010,
            0xffffffff81100810,
            0xffffffff81200010,
            0xffffffff81200410,
            0xffffffff81400010,
            0,
        ];
        assert_eq!(
            render_stack(&table, &frames, 8),
            "do_nanosleep <- hrtimer_nanosleep <- __x64_sys_clock_nanosleep"
        );
        assert_eq!(render_stack(&table, &frames, 1), "do_nanosleep");
    }

    #[test]
    fn a_timer_s_wake_up_is_an_interrupt_s() {
        let table = KernelSymbolTable::parse(
            "ffffffff81000000 T try_to_wake_up\nffffffff81001000 T hrtimer_wakeup\n\
             ffffffff81002000 T __hrtimer_run_queues\nffffffff81003000 T futex_wake\n"
                .as_bytes(),
        );
        assert!(in_interrupt(
            &table,
            &[0xffffffff81000010, 0xffffffff81001010, 0xffffffff81002010]
        ));
        assert!(!in_interrupt(
            &table,
            &[0xffffffff81000010, 0xffffffff81003010]
        ));
    }

    #[test]
    fn hidden_addresses_leave_an_empty_table() {
        let table = KernelSymbolTable::parse("0000000000000000 T _stext\n".as_bytes());
        assert!(table.is_empty());
    }
}
