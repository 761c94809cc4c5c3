// SPDX-License-Identifier: Apache-2.0 OR MIT
//! An untraced process's system call loop: the measured side of `cargo
//! xtask bench`'s cost to other processes (`hold_probes` or bpftrace holds
//! probes in another process meanwhile).
//!
//! `syscall_loop getppid|read CALLS BATCHES` makes BATCHES batches of CALLS
//! calls, each `getppid()` or a 1-byte `read` of `/dev/zero` (one
//! `vfs_read`), straight through libc so that nothing but the call is timed,
//! and prints `SYSCALL-LOOP <call> min <ns> median <ns> max <ns>`, the time
//! per call of the fastest, the median and the slowest batch. The bench
//! takes the fastest: on a loaded machine (and more so in an emulated
//! guest, whose clock runs on while its host thread waits) disturbances
//! only ever add time, and the fastest batch is the least disturbed.

use std::process::ExitCode;
use std::time::Instant;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number = |i: usize| {
        args.get(i)
            .and_then(|n| n.parse::<u32>().ok())
            .filter(|n| *n > 0)
    };
    let (Some(call), Some(calls), Some(batches)) = (args.first(), number(1), number(2)) else {
        eprintln!("usage: syscall_loop getppid|read CALLS BATCHES (positive numbers)");
        return ExitCode::from(2);
    };
    let fd = match call.as_str() {
        "getppid" => -1,
        "read" => {
            // SAFETY: a NUL-terminated path; the descriptor is checked.
            let fd = unsafe { libc::open(c"/dev/zero".as_ptr(), libc::O_RDONLY) };
            if fd < 0 {
                eprintln!(
                    "syscall_loop: /dev/zero: {}",
                    std::io::Error::last_os_error()
                );
                return ExitCode::FAILURE;
            }
            fd
        }
        other => {
            eprintln!("syscall_loop: call `{other}`: expected `getppid` or `read`");
            return ExitCode::from(2);
        }
    };
    let mut byte = 0u8;
    let mut per_call = Vec::with_capacity(batches as usize);
    for _ in 0..batches {
        let started = Instant::now();
        for _ in 0..calls {
            if fd < 0 {
                // SAFETY: no arguments, cannot fail.
                unsafe { libc::getppid() };
            // SAFETY: one byte into a live byte, from an open descriptor.
            } else if unsafe { libc::read(fd, std::ptr::from_mut(&mut byte).cast(), 1) } != 1 {
                eprintln!("syscall_loop: read: {}", std::io::Error::last_os_error());
                return ExitCode::FAILURE;
            }
        }
        per_call.push(started.elapsed().as_nanos() as f64 / f64::from(calls));
    }
    per_call.sort_by(f64::total_cmp);
    println!(
        "SYSCALL-LOOP {call} min {:.1} median {:.1} max {:.1}",
        per_call[0],
        per_call[per_call.len() / 2],
        per_call[per_call.len() - 1]
    );
    ExitCode::SUCCESS
}
