// SPDX-License-Identifier: Apache-2.0 OR MIT
//! What tracefs says about the running kernel: the syscalls it has
//! tracepoints for (and their argument formats) and the functions it can
//! trace.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use super::KernelError;

/// Where tracefs is mounted.
pub const TRACEFS: &str = "/sys/kernel/tracing";

/// The `sys_enter_<name>` tracepoint formats of some syscalls, and the names
/// of every syscall the kernel has tracepoints for (for suggestions).
#[derive(Debug, Default, Clone)]
pub struct SyscallFormats {
    formats: HashMap<&'static str, String>,
    known: Vec<String>,
}

impl SyscallFormats {
    /// No formats.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the format text of `syscall`'s `sys_enter_<syscall>` event.
    pub fn insert(&mut self, syscall: &'static str, format: String) {
        self.formats.insert(syscall, format);
    }

    /// The format of `syscall`, when it was read.
    pub fn get(&self, syscall: &str) -> Option<&str> {
        self.formats.get(syscall).map(String::as_str)
    }

    /// Every syscall with tracepoints (empty when tracefs was not read).
    pub fn known(&self) -> &[String] {
        &self.known
    }
}

/// The directory of the syscall events.
pub fn syscall_events() -> PathBuf {
    Path::new(TRACEFS).join("events/syscalls")
}

/// The syscalls this kernel has `sys_enter_*` tracepoints for, sorted.
pub fn syscall_names() -> std::io::Result<Vec<String>> {
    let mut names: Vec<String> = std::fs::read_dir(syscall_events())?
        .filter_map(|e| {
            e.ok()?
                .file_name()
                .to_str()?
                .strip_prefix("sys_enter_")
                .map(str::to_owned)
        })
        .collect();
    names.sort_unstable();
    Ok(names)
}

/// Reads the formats of `syscalls`, mounting tracefs first where it is not
/// (as bpftrace and perf do). A syscall without tracepoints is left out
/// (the planner names it, with suggestions from [`SyscallFormats::known`]).
pub fn read_syscall_formats(syscalls: &[&'static str]) -> Result<SyscallFormats, KernelError> {
    let mut formats = SyscallFormats::new();
    if syscalls.is_empty() {
        return Ok(formats);
    }
    let tracefs = Path::new(TRACEFS);
    let events = syscall_events();
    // Mount only what is not there: `exists()` would also say no where
    // tracefs is mounted but this process may not look inside.
    match std::fs::metadata(&events) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => super::sys::mount_tracefs(tracefs)
            .map_err(|e| KernelError::Tracefs {
                path: tracefs.to_owned(),
                reason: format!("it is not mounted, and mounting it failed: {e}"),
            })?,
        Err(e) => {
            return Err(KernelError::Tracefs {
                path: tracefs.to_owned(),
                reason: format!("cannot read {}: {e}", events.display()),
            })
        }
        Ok(_) => {}
    }
    for &name in syscalls {
        let path = events.join(format!("sys_enter_{name}/format"));
        match std::fs::read_to_string(&path) {
            Ok(text) => formats.insert(name, text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if formats.known.is_empty() {
                    formats.known = syscall_names().unwrap_or_default();
                }
            }
            Err(e) => {
                return Err(KernelError::Tracefs {
                    path: tracefs.to_owned(),
                    reason: format!("cannot read {}: {e}", path.display()),
                })
            }
        }
    }
    Ok(formats)
}

/// The functions the kernel can trace (`available_filter_functions`). It
/// is unreadable where the function tracer is locked down (even for root);
/// then nothing is ruled out by it, and the attach says what the kernel
/// refuses.
pub fn traceable_functions() -> std::io::Result<HashSet<String>> {
    let text = std::fs::read_to_string(Path::new(TRACEFS).join("available_filter_functions"))?;
    Ok(parse_filter_functions(&text))
}

/// The function names of `available_filter_functions` text (`name` or
/// `name [module]` lines).
pub fn parse_filter_functions(text: &str) -> HashSet<String> {
    text.lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// The formats of the `sched:<event>` tracepoints, mounting tracefs first
/// where it is not.
pub fn read_sched_format(event: &str) -> Result<String, KernelError> {
    read_event_format("sched", event)
}

/// The format of tracepoint `<category>:<event>`, mounting tracefs first
/// where it is not.
pub fn read_event_format(category: &str, event: &str) -> Result<String, KernelError> {
    let tracefs = Path::new(TRACEFS);
    let path = tracefs.join(format!("events/{category}/{event}/format"));
    if let Err(e) = std::fs::metadata(tracefs.join("events")) {
        if e.kind() == std::io::ErrorKind::NotFound {
            super::sys::mount_tracefs(tracefs).map_err(|e| KernelError::Tracefs {
                path: tracefs.to_owned(),
                reason: format!("it is not mounted, and mounting it failed: {e}"),
            })?;
        }
    }
    std::fs::read_to_string(&path).map_err(|e| KernelError::Tracefs {
        path: tracefs.to_owned(),
        reason: format!("cannot read {}: {e}", path.display()),
    })
}

/// The offset and size of field `name` in a tracepoint's `format` text
/// (`field:pid_t next_pid; offset:56; size:4; signed:1;`).
pub fn field_layout(format: &str, name: &str) -> Option<(usize, usize)> {
    format.lines().find_map(|line| {
        let mut parts = line.trim().split(';').map(str::trim);
        let declaration = parts.next()?.strip_prefix("field:")?;
        let field = declaration.rsplit([' ', '*']).next()?;
        let field = field.split('[').next()?;
        if field != name {
            return None;
        }
        let offset = parts.next()?.strip_prefix("offset:")?.parse().ok()?;
        let size = parts.next()?.strip_prefix("size:")?.parse().ok()?;
        Some((offset, size))
    })
}

#[cfg(test)]
mod sched_format_tests {
    use super::field_layout;

    #[test]
    fn fields_are_found_by_name() {
        let format = "name: sched_switch\nID: 316\nformat:\n\
            \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
            \tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\
            \tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;\n\
            \tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;\n";
        assert_eq!(field_layout(format, "next_pid"), Some((56, 4)));
        assert_eq!(field_layout(format, "prev_state"), Some((32, 8)));
        assert_eq!(field_layout(format, "prev_comm"), Some((8, 16)));
        assert_eq!(field_layout(format, "pid"), None);
    }
}
