// SPDX-License-Identifier: Apache-2.0 OR MIT
//! OBI's shared traces map (OTEP 4855), as another process reads it (run in
//! the VM by `cargo xtask test`; on a host as root too, with bpffs mounted
//! at `/sys/fs/bpf`: the probe is a syscall tracepoint). kspan runs with
//! `KspanBuilder::obi_traces_map`; threads make spans current, and
//! `kspan-obi-map`, a process of its own, reads the pinned map: each
//! thread's `pid_tgid` holds exactly its span's trace and span id, and
//! nothing once the span is no longer current, the thread has exited, or
//! the runtime has stopped. A map of another layout at the pin is refused,
//! naming what it found and the fix. A test binary of its own: a process
//! keeps the first map it opens.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;

use kspan::context::obi::ObiMapError;
use kspan::ObiTracesMap;
use libbpf_rs::{MapHandle, MapType};
use opentelemetry::trace::{Span as _, TraceContextExt as _, Tracer as _, TracerProvider as _};
use opentelemetry::{Context, ContextGuard};
use opentelemetry_sdk::trace::SdkTracer;

#[kspan::kernel_span(syscall = "read")]
fn read(fd: u32, count: usize, ret: i64) {}

const PIN_ROOT: &str = "/sys/fs/bpf";

/// A span's ids as the reader prints them: (trace id, span id) in hex.
type Ids = (String, String);

/// Every entry of the map pinned at `path`, read by another process.
fn read_map(path: &Path) -> HashMap<u64, Ids> {
    let out = Command::new(kspan_tests::binary("kspan-obi-map"))
        .arg(path)
        .output()
        .expect("kspan-obi-map runs");
    assert!(
        out.status.success(),
        "kspan-obi-map failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("text")
        .lines()
        .map(|line| {
            let words: Vec<&str> = line.split(' ').collect();
            let [key, trace, span] = words[..] else {
                panic!("three words: {line:?}")
            };
            let key = u64::from_str_radix(key, 16).expect("a hex key");
            (key, (trace.to_owned(), span.to_owned()))
        })
        .collect()
}

/// The entries of this process: keys whose high 32 bits are its id.
fn ours(entries: HashMap<u64, Ids>) -> HashMap<u64, Ids> {
    entries
        .into_iter()
        .filter(|(key, _)| (key >> 32) as u32 == std::process::id())
        .collect()
}

/// The calling thread's `pid_tgid`, from `/proc/thread-self`.
fn key() -> u64 {
    (u64::from(std::process::id()) << 32) | kspan_tests::gettid() as u64
}

thread_local! {
    /// The contexts a thread attached, innermost last.
    static ATTACHED: RefCell<Vec<ContextGuard>> = const { RefCell::new(Vec::new()) };
}

/// Starts a span named `name` under the current context and attaches it;
/// its ids.
fn enter(tracer: &SdkTracer, name: &'static str) -> Ids {
    let span = tracer.start(name);
    let sc = span.span_context().clone();
    let guard = Context::current_with_span(span).attach();
    ATTACHED.with(|a| a.borrow_mut().push(guard));
    (sc.trace_id().to_string(), sc.span_id().to_string())
}

/// Detaches the innermost context `enter` attached (its span ends).
fn leave() {
    let guard = ATTACHED.with(|a| a.borrow_mut().pop());
    drop(guard.expect("a context to leave"));
}

type Job = Box<dyn FnOnce() + Send>;

/// A thread running jobs it is sent, one at a time.
struct Worker {
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<std::thread::JoinHandle<()>>,
    key: u64,
}

impl Worker {
    fn spawn() -> Worker {
        let (jobs, queue) = mpsc::channel::<Job>();
        let (key_tx, key_rx) = mpsc::channel();
        let thread = std::thread::spawn(move || {
            key_tx.send(key()).unwrap();
            for job in queue {
                job();
            }
        });
        Worker {
            jobs: Some(jobs),
            thread: Some(thread),
            key: key_rx.recv().unwrap(),
        }
    }

    /// Runs `job` on the worker; its result.
    fn run<R: Send + 'static>(&self, job: impl FnOnce() -> R + Send + 'static) -> R {
        let (done, result) = mpsc::channel();
        let job: Job = Box::new(move || done.send(job()).unwrap());
        self.jobs.as_ref().unwrap().send(job).unwrap();
        result.recv().unwrap()
    }

    /// Ends the thread; what it still has attached is left attached (its
    /// guards are forgotten), so only the record's release at exit can
    /// remove its entry.
    fn exit_attached(mut self) {
        self.run(|| ATTACHED.with(|a| a.borrow_mut().drain(..).for_each(std::mem::forget)));
        drop(self.jobs.take());
        self.thread.take().unwrap().join().unwrap();
    }
}

/// Removes, at the end, what the test made under bpffs.
struct Made(Vec<PathBuf>);

impl Drop for Made {
    fn drop(&mut self) {
        for path in self.0.iter().rev() {
            let _ = std::fs::remove_file(path).or_else(|_| std::fs::remove_dir(path));
        }
    }
}

#[tokio::test(flavor = "current_thread")]
#[ignore = "needs root and bpffs at /sys/fs/bpf; run by `cargo xtask test` in the VM"]
async fn other_processes_read_each_threads_span_from_the_pinned_map() {
    // No span processor: the spans are only made current (and those a
    // thread leaves attached end at its exit, with nothing to export them).
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_id_generator(kspan::KernelSpanIds::default())
        .build();
    let tracer = provider.tracer("obi");
    let path = ObiTracesMap::default().path();
    assert_eq!(path, Path::new("/sys/fs/bpf/otel/traces_ctx_v1"));
    // What was there before is left there; what the test makes goes.
    let mut made = Made(Vec::new());
    for p in [path.parent().unwrap(), &path] {
        if !p.exists() {
            made.0.push(p.to_owned());
        }
    }

    // A map of another layout at the pin: refused, before anything loads.
    let elsewhere = Path::new(PIN_ROOT).join(format!("kspan-obi-test-{}", std::process::id()));
    let wrong = ObiTracesMap::default().pin_root(&elsewhere).path();
    std::fs::create_dir_all(wrong.parent().unwrap()).expect("bpffs at /sys/fs/bpf");
    let mut wrong_map = MapHandle::create(
        MapType::LruHash,
        Some("traces_ctx_v1"),
        8,
        16,
        1 << 14,
        &libbpf_rs::libbpf_sys::bpf_map_create_opts {
            sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _,
            ..Default::default()
        },
    )
    .unwrap();
    wrong_map.pin(&wrong).unwrap();
    let refused = Made(vec![
        elsewhere.clone(),
        wrong.parent().unwrap().to_owned(),
        wrong.clone(),
    ]);
    let e = kspan::Kspan::builder(&provider)
        .probe(&read)
        .obi_traces_map(ObiTracesMap::default().pin_root(&elsewhere))
        .start()
        .expect_err("a map with 16-byte values is not OTEP 4855's");
    assert!(
        matches!(e, kspan::Error::ObiTracesMap(ObiMapError::Layout { .. })),
        "{e:?}"
    );
    let text = e.to_string();
    for part in [
        format!("{} is a BPF map of type LruHash", wrong.display()),
        "16-byte values".to_owned(),
        "24-byte values".to_owned(),
        format!("rm {}", wrong.display()),
        "pin_root".to_owned(),
    ] {
        assert!(text.contains(&part), "{part:?} in {text}");
    }
    drop(refused);
    assert!(!elsewhere.exists());

    // The observer publishes from here on: a worker's span before start.
    kspan::context::register_observer().unwrap();
    let early = Worker::spawn();
    let t = tracer.clone();
    let early_outer = early.run(move || enter(&t, "early"));
    let main_ids = enter(&tracer, "main");

    let kspan = kspan::Kspan::builder(&provider)
        .probe(&read)
        .obi_traces_map(ObiTracesMap::default())
        .start()
        .unwrap_or_else(|e| panic!("kspan starts with the map: {e}"));
    assert!(path.exists(), "pinned at {}", path.display());

    // The thread that started kspan has its entry; the early worker not
    // yet: it has published nothing since.
    let main_key = key();
    assert_eq!(
        ours(read_map(&path)),
        HashMap::from([(main_key, main_ids.clone())]),
        "the starting thread's entry, and no other"
    );

    let (a, b) = (Worker::spawn(), Worker::spawn());
    let t = tracer.clone();
    let a_ids = a.run(move || enter(&t, "a"));
    let t = tracer.clone();
    let b_ids = b.run(move || enter(&t, "b"));
    let t = tracer.clone();
    let early_inner = early.run(move || enter(&t, "early-inner"));
    assert_ne!(a_ids, b_ids);
    assert_ne!(early_inner, early_outer);
    assert_eq!(
        ours(read_map(&path)),
        HashMap::from([
            (main_key, main_ids.clone()),
            (a.key, a_ids.clone()),
            (b.key, b_ids.clone()),
            (early.key, early_inner.clone()),
        ]),
        "each thread's pid_tgid holds its own span, and only these threads have entries"
    );

    // Back to the outer span: written again; out of every span: removed.
    early.run(leave);
    assert_eq!(ours(read_map(&path)).get(&early.key), Some(&early_outer));
    early.run(leave);
    a.run(leave);
    let now = ours(read_map(&path));
    assert!(!now.contains_key(&early.key), "{now:?}");
    assert!(!now.contains_key(&a.key), "{now:?}");
    assert_eq!(now.get(&b.key), Some(&b_ids));

    // A nested span on b, then b exits with it still attached.
    let t = tracer.clone();
    let b_inner = b.run(move || enter(&t, "b-inner"));
    assert_eq!(ours(read_map(&path)).get(&b.key), Some(&b_inner));
    let b_key = b.key;
    b.exit_attached();
    assert!(
        !ours(read_map(&path)).contains_key(&b_key),
        "an exited thread's entry is removed with its record"
    );

    leave();
    assert_eq!(
        ours(read_map(&path)),
        HashMap::from([]),
        "no span current on any thread"
    );

    // A span current when the runtime stops: its end removes the entry.
    let t = tracer.clone();
    let a_again = a.run(move || enter(&t, "a-again"));
    assert_eq!(
        ours(read_map(&path)),
        HashMap::from([(a.key, a_again.clone())])
    );
    let stats = kspan.shutdown().await.expect("kspan shuts down");
    assert_eq!(stats.obi_map_failures, 0, "{stats:?}");
    assert_eq!(ours(read_map(&path)), HashMap::from([]), "swept at the end");
    // And nothing is written after it.
    a.run(leave);
    let t = tracer.clone();
    a.run(move || enter(&t, "after"));
    assert_eq!(
        ours(read_map(&path)),
        HashMap::from([]),
        "off after shutdown"
    );
    a.exit_attached();
    early.exit_attached();
    let gone = made.0.clone();
    drop(made);
    for p in gone {
        assert!(!p.exists(), "{} is left behind", p.display());
    }
}
