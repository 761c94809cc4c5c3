// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The OTEP 4719 process context from kspan's side, in a process of its own
//! (there is one per process): another writer's is found and left alone
//! (`publish_process_context` and `start` fail naming it, and
//! `process_context(false)` starts without it); once that one is gone kspan
//! publishes exactly one, which `start` replaces in place and a forked
//! child does not inherit (`MADV_DONTFORK`). Host: syscall sources, root.

use kspan_tests::in_memory_provider;

#[kspan::kernel_span(syscall = "getppid")]
fn getppid(ret: i64) {}

/// `/proc/self/maps` lines naming `OTEL_CTX`.
fn process_context_mappings() -> Vec<String> {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|l| l.contains("OTEL_CTX"))
        .map(str::to_owned)
        .collect()
}

/// Another writer's process context, made as OTEP 4719 says (a memfd
/// named `OTEL_CTX`, mapped): its address and length.
fn theirs() -> (*mut libc::c_void, usize) {
    // SAFETY: a memfd of one page, mapped privately, then closed; the
    // header's first field written.
    unsafe {
        let fd = libc::memfd_create(c"OTEL_CTX".as_ptr(), libc::MFD_CLOEXEC);
        assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
        assert_eq!(libc::ftruncate(fd, 4096), 0);
        let at = libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE,
            fd,
            0,
        );
        assert_ne!(at, libc::MAP_FAILED);
        libc::close(fd);
        at.cast::<[u8; 8]>().write(*b"OTEL_CTX");
        (at, 4096)
    }
}

/// Whether a forked child sees a process-context mapping (the child reads
/// its maps with system calls alone: it is a fork of a threaded process).
fn forked_child_sees_one() -> bool {
    // SAFETY: the child calls only async-signal-safe functions (open,
    // read, _exit) on a buffer of the parent's stack.
    unsafe {
        let pid = libc::fork();
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            let mut buf = [0u8; 1 << 16];
            let fd = libc::open(c"/proc/self/maps".as_ptr(), libc::O_RDONLY);
            let mut len = 0usize;
            loop {
                let n = libc::read(fd, buf.as_mut_ptr().add(len).cast(), buf.len() - len);
                if n <= 0 || len + n as usize >= buf.len() {
                    break;
                }
                len += n as usize;
            }
            let found = buf[..len].windows(8).any(|w| w == b"OTEL_CTX");
            libc::_exit(i32::from(found));
        }
        let mut status = 0;
        assert_eq!(libc::waitpid(pid, &mut status, 0), pid);
        assert!(libc::WIFEXITED(status));
        libc::WEXITSTATUS(status) == 1
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn another_writers_context_is_kept_and_kspans_is_published_once() {
    let (at, len) = theirs();
    let their_line = process_context_mappings();
    assert_eq!(their_line.len(), 1, "{their_line:?}");

    let err = kspan::context::publish_process_context().expect_err("theirs is there");
    let text = err.to_string();
    assert!(text.contains(&their_line[0]), "names the mapping: {text}");
    assert!(
        text.contains("process_context(false)"),
        "names the fix: {text}"
    );

    let (provider, _exporter) = in_memory_provider();
    let err = kspan::Kspan::builder(&provider)
        .probe(&getppid)
        .start()
        .expect_err("start refuses to make a second one")
        .to_string();
    assert!(
        err.contains("already has an OTEP 4719 process context"),
        "{err}"
    );
    let kspan = kspan::Kspan::builder(&provider)
        .probe(&getppid)
        .process_context(false)
        .start()
        .expect("starts without one");
    assert_eq!(process_context_mappings(), their_line, "theirs, untouched");
    kspan.shutdown().await.unwrap();

    // Theirs gone: kspan's, once, replaced in place by `start`.
    // SAFETY: the mapping `theirs` made.
    unsafe { libc::munmap(at, len) };
    kspan::context::publish_process_context().unwrap();
    let ours = process_context_mappings();
    assert_eq!(ours.len(), 1, "{ours:?}");
    assert!(
        ours[0].contains("/memfd:OTEL_CTX") || ours[0].contains("[anon"),
        "a name readers look for: {ours:?}"
    );
    let kspan = kspan::Kspan::builder(&provider)
        .probe(&getppid)
        .start()
        .expect("starts, replacing its own");
    assert_eq!(process_context_mappings(), ours, "the same mapping");
    assert!(!forked_child_sees_one(), "MADV_DONTFORK: a child has none");
    kspan.shutdown().await.unwrap();
}
