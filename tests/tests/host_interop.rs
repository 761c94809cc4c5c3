// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Interoperability with every OTEP 4947 and OTEP 4719 reader: the
//! `interop_service` example (built as README says, `kspan-build` in its
//! `build.rs`, stripped here as a release would be) is read from outside by
//! `kspan_tests::otep_reader`, a reader written from the two OTEP texts
//! with no kspan code: it stops every thread (ptrace), finds the process
//! context in `/proc/PID/maps`, decodes its payload, finds
//! `otel_thread_ctx_v1` in `.dynsym` and reads each thread's record through
//! its thread pointer. What it reads must be what the service says it holds.

use std::collections::HashMap;
use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};

use kspan_tests::otep_reader;

/// What a thread of the service said it holds.
#[derive(Debug)]
enum Holds {
    Span {
        trace: String,
        span: String,
        route: String,
        method: String,
    },
    Nothing,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn a_reader_written_from_the_otep_texts_reads_what_the_service_holds() {
    // A stripped copy: readers must find the symbol in `.dynsym`.
    let dir = std::env::temp_dir().join(format!("kspan-interop-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let binary = dir.join("interop_service");
    std::fs::copy(kspan_tests::example("interop_service"), &binary).unwrap();
    let status = Command::new("strip").arg(&binary).status().expect("strip");
    assert!(status.success());

    let mut child = Command::new(&binary)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut holds = HashMap::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        let words: Vec<&str> = line.split_whitespace().collect();
        match words[..] {
            ["ready"] => break,
            ["span", tid, trace, span, route, method] => {
                holds.insert(
                    tid.parse::<i32>().unwrap(),
                    Holds::Span {
                        trace: trace.into(),
                        span: span.into(),
                        route: route.into(),
                        method: method.into(),
                    },
                );
            }
            ["none", tid] => {
                holds.insert(tid.parse::<i32>().unwrap(), Holds::Nothing);
            }
            _ => panic!("unexpected line from the service: {line}"),
        }
    }
    assert_eq!(holds.len(), 4, "{holds:?}");

    let snapshot = otep_reader::snapshot(pid);
    // The service goes on once its input closes, whatever the reader found.
    drop(child.stdin.take());
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    let status = child.wait().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let snapshot = snapshot.expect("the reader reads the service");
    assert!(
        status.success(),
        "the service ran on after the reader: {rest:?}"
    );

    let process = snapshot.process.as_ref().expect("a process context");
    assert_eq!(process.version, 2);
    assert_ne!(process.published_at_ns, 0);
    assert_eq!(
        process.resource_str("service.name"),
        Some("interop-service")
    );
    assert_eq!(process.resource_str("service.version"), Some("1.2.3"));
    assert_eq!(process.schema_version(), Some("tls_v1"));
    let key_map = process.key_map();
    assert_eq!(key_map, ["http.route", "http.request.method"]);
    assert!(
        snapshot.tls_symbol.is_some(),
        "otel_thread_ctx_v1 in .dynsym"
    );

    let threads: HashMap<i32, &otep_reader::ThreadRead> =
        snapshot.threads.iter().map(|t| (t.tid, t)).collect();
    for (tid, held) in &holds {
        let thread = threads
            .get(tid)
            .unwrap_or_else(|| panic!("thread {tid} read: {:?}", snapshot.threads));
        let valid = thread.record.as_ref().filter(|r| r.valid == 1);
        match held {
            Holds::Span {
                trace,
                span,
                route,
                method,
            } => {
                let record = valid.unwrap_or_else(|| panic!("thread {tid}: {thread:?}"));
                assert_eq!(hex(&record.trace_id), *trace, "thread {tid}");
                assert_eq!(hex(&record.span_id), *span, "thread {tid}");
                assert_eq!(record.trace_flags & 1, 1, "sampled");
                let mut attributes = record.attributes(&key_map);
                attributes.sort();
                assert_eq!(
                    attributes,
                    [
                        ("http.request.method".to_owned(), method.clone()),
                        ("http.route".to_owned(), route.clone()),
                    ],
                    "thread {tid}"
                );
            }
            Holds::Nothing => {
                assert!(valid.is_none(), "thread {tid} holds no span: {thread:?}");
            }
        }
    }
}
