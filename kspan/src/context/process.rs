// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The OTEP 4719 process context: what a reader outside the process needs
//! before it reads any thread's record.
//!
//! OTEP 4947 readers look for `otel_thread_ctx_v1` only once the process
//! context says the process publishes thread records
//! (`threadlocal.schema_version`), and they resolve the record's attribute
//! indexes through its `threadlocal.attribute_key_map`. The process context
//! also carries the service's resource, which profilers name the process
//! by. It is one small mapping per process:
//!
//! * a 32-byte header: `"OTEL_CTX"`, version 2, the payload's size, the
//!   `CLOCK_BOOTTIME` time of publication, the payload's address;
//! * the payload, a `ProcessContext` protobuf message (the resource, then
//!   the `threadlocal.*` attributes), kept on the heap, since an update
//!   replaces it.
//!
//! The publication follows the OTEP step by step: `memfd_create("OTEL_CTX")`
//! (an anonymous mapping where memfds are refused), mapped and the file
//! closed, `MADV_DONTFORK` (a child does not inherit a stale context), the
//! header's fields, a fence, the timestamp last (readers take a zero
//! timestamp as "being written"), then the mapping named with
//! `PR_SET_VMA_ANON_NAME`. A second publication in the process updates the
//! same header (timestamp zeroed, fence, payload fields, fence, a new
//! timestamp): the process context is a singleton, replaced, never
//! duplicated. A process context that someone else published (another
//! SDK's) is found in `/proc/self/maps` and left alone: there must not be
//! two, and overwriting another writer's would lose what it says.

use std::ptr::NonNull;
use std::sync::atomic::{fence, Ordering};
use std::sync::Mutex;

use opentelemetry::{Array, KeyValue, StringValue, Value};
use opentelemetry_sdk::Resource;

/// The header's signature.
const SIGNATURE: [u8; 8] = *b"OTEL_CTX";
/// The header format version OTEP 4719 defines.
const VERSION: u32 = 2;
/// The name of the memfd and of the mapping.
const NAME: &std::ffi::CStr = c"OTEL_CTX";

/// `threadlocal.schema_version`: the record format (OTEP 4947 as merged).
pub const SCHEMA_VERSION: &str = "tls_v1";
/// The process-context attribute naming the record format.
pub const SCHEMA_VERSION_KEY: &str = "threadlocal.schema_version";
/// The process-context attribute listing record attribute names by index.
pub const ATTRIBUTE_KEY_MAP_KEY: &str = "threadlocal.attribute_key_map";

/// The OTEP 4719 header, as laid out in the mapping.
#[repr(C)]
struct Header {
    signature: [u8; 8],
    version: u32,
    payload_size: u32,
    monotonic_published_at_ns: u64,
    payload: u64,
}

const _: () = assert!(std::mem::size_of::<Header>() == 32);
const _: () = assert!(std::mem::offset_of!(Header, monotonic_published_at_ns) == 16);

/// Why the process context could not be published.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProcessContextError {
    /// Another writer's process context is in this process.
    #[error(
        "this process already has an OTEP 4719 process context that kspan did not publish \
         (`{mapping}` in /proc/self/maps, another OpenTelemetry SDK or library's); kspan leaves \
         it alone, since a process has one: add `threadlocal.schema_version = \"{SCHEMA_VERSION}\"` \
         (and kspan's `threadlocal.attribute_key_map`, `kspan::context::ContextPublisher::key_map`) \
         to that one's attributes so that OTEP 4947 readers find the thread records and call \
         `KspanBuilder::process_context(false)`, or stop the other writer"
    )]
    Taken {
        /// The other mapping's line in `/proc/self/maps`.
        mapping: String,
    },
    /// A step of the publication failed.
    #[error("publishing the OTEP 4719 process context failed at `{step}`: {source}")]
    System {
        /// The system call that failed.
        step: &'static str,
        /// Its error.
        #[source]
        source: std::io::Error,
    },
    /// The payload is larger than the header's 32-bit size can say.
    #[error("the process context's payload is {0} bytes, more than its header can describe")]
    TooLarge(usize),
}

/// What this process published, while it is published.
struct Publication {
    /// The mapping holding the header (one page).
    header: NonNull<Header>,
    len: usize,
    /// The payload the header points at.
    payload: Box<[u8]>,
    /// The timestamp written last.
    published_at_ns: u64,
    /// The process that published it (a forked child has no mapping: it
    /// publishes afresh).
    pid: u32,
}

// SAFETY: the mapping is the process's own, written only under `PUBLISHED`.
unsafe impl Send for Publication {}

static PUBLISHED: Mutex<Option<Publication>> = Mutex::new(None);

/// The tracer provider's resource, once a [`super::ContextPublisher`] in
/// it was given it.
static RESOURCE: Mutex<Option<Vec<KeyValue>>> = Mutex::new(None);

/// Keeps the provider's resource for the process context.
pub(crate) fn set_resource(resource: &Resource) {
    let attributes = resource
        .iter()
        .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
        .collect();
    *RESOURCE.lock().unwrap_or_else(|p| p.into_inner()) = Some(attributes);
}

/// Whether a [`super::ContextPublisher`] gave the process context its
/// provider's resource.
pub(crate) fn has_provider_resource() -> bool {
    RESOURCE.lock().unwrap_or_else(|p| p.into_inner()).is_some()
}

/// Publishes (or updates) the process context with the provider's
/// resource (the SDK's default one until a publisher is given it) and
/// `key_map`.
pub(crate) fn publish_current(key_map: &[String]) -> Result<(), ProcessContextError> {
    let resource = RESOURCE
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
        .unwrap_or_else(|| {
            Resource::builder()
                .build()
                .iter()
                .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
                .collect()
        });
    publish(payload(&resource, key_map))
}

/// Publishes `payload` as the process context: the first time in a
/// process by the OTEP's publication protocol, then by its update
/// protocol on the same header. An unchanged payload is left as it is.
pub(crate) fn publish(payload: Vec<u8>) -> Result<(), ProcessContextError> {
    let size =
        u32::try_from(payload.len()).map_err(|_| ProcessContextError::TooLarge(payload.len()))?;
    let mut published = PUBLISHED.lock().unwrap_or_else(|p| p.into_inner());
    if published
        .as_ref()
        .is_some_and(|p| p.pid != std::process::id())
    {
        // A forked child: MADV_DONTFORK kept the mapping out of it. The
        // parent's header and payload are not this process's to free.
        std::mem::forget(published.take());
    }
    if let Some(p) = published.as_mut() {
        if *p.payload == *payload {
            return Ok(());
        }
        update(p, payload.into_boxed_slice(), size);
        return Ok(());
    }
    if let Some(mapping) = foreign_mapping() {
        return Err(ProcessContextError::Taken { mapping });
    }
    *published = Some(create(payload.into_boxed_slice(), size)?);
    Ok(())
}

/// Whether this process has published its process context.
pub(crate) fn is_published() -> bool {
    PUBLISHED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .is_some_and(|p| p.pid == std::process::id())
}

/// The address of this process's own process-context header, if published.
#[cfg(test)]
pub(crate) fn published_header() -> Option<usize> {
    let published = PUBLISHED.lock().unwrap_or_else(|p| p.into_inner());
    published
        .as_ref()
        .filter(|p| p.pid == std::process::id())
        .map(|p| p.header.as_ptr() as usize)
}

/// `CLOCK_BOOTTIME` in nanoseconds, never 0 and after `after`.
fn timestamp(after: u64) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    let now = (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64);
    now.max(after.saturating_add(1)).max(1)
}

fn last_os_error(step: &'static str) -> ProcessContextError {
    ProcessContextError::System {
        step,
        source: std::io::Error::last_os_error(),
    }
}

/// The publication protocol, steps 2 to 10.
fn create(payload: Box<[u8]>, size: u32) -> Result<Publication, ProcessContextError> {
    // SAFETY: sysconf has no preconditions.
    let len = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
    let memfd = memfd();
    let at = match memfd {
        Some(fd) => {
            // SAFETY: a private mapping of the memfd just made, sized
            // below; the file is closed once it is mapped (the mapping
            // keeps it).
            unsafe {
                let at = if libc::ftruncate(fd, len as libc::off_t) == 0 {
                    libc::mmap(
                        std::ptr::null_mut(),
                        len,
                        libc::PROT_READ | libc::PROT_WRITE,
                        libc::MAP_PRIVATE,
                        fd,
                        0,
                    )
                } else {
                    libc::MAP_FAILED
                };
                let error = last_os_error("ftruncate/mmap of the memfd");
                libc::close(fd);
                if at == libc::MAP_FAILED {
                    return Err(error);
                }
                at
            }
        }
        // SAFETY: an anonymous private mapping of fresh memory.
        None => unsafe {
            let at = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            if at == libc::MAP_FAILED {
                return Err(last_os_error("mmap"));
            }
            at
        },
    };
    let unmap = |error| {
        // SAFETY: the mapping made above, not yet published.
        unsafe { libc::munmap(at, len) };
        Err(error)
    };
    // SAFETY: advice on the mapping just made.
    if unsafe { libc::madvise(at, len, libc::MADV_DONTFORK) } != 0 {
        return unmap(last_os_error("madvise(MADV_DONTFORK)"));
    }
    let header = at.cast::<Header>();
    let published_at_ns = timestamp(0);
    // SAFETY: the header is at the start of the page-sized mapping, which
    // no reader considers until the timestamp is non-zero.
    unsafe {
        (&raw mut (*header).signature).write(SIGNATURE);
        (&raw mut (*header).version).write(VERSION);
        (&raw mut (*header).payload_size).write(size);
        (&raw mut (*header).payload).write(payload.as_ptr() as u64);
        fence(Ordering::SeqCst);
        std::ptr::write_volatile(
            &raw mut (*header).monotonic_published_at_ns,
            published_at_ns,
        );
    }
    let named = name(at, len);
    if memfd.is_none() && !named {
        // Neither a memfd nor a name: readers could not find it.
        return unmap(ProcessContextError::System {
            step: "prctl(PR_SET_VMA_ANON_NAME) after memfd_create was refused",
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(Publication {
        // SAFETY: mmap succeeded, so `at` is not null.
        header: unsafe { NonNull::new_unchecked(header) },
        len,
        payload,
        published_at_ns,
        pid: std::process::id(),
    })
}

/// The update protocol: timestamp zeroed, fence, the payload's fields,
/// fence, a new timestamp, the name again.
fn update(p: &mut Publication, payload: Box<[u8]>, size: u32) {
    let header = p.header.as_ptr();
    let published_at_ns = timestamp(p.published_at_ns);
    // SAFETY: the header is this process's mapping; readers re-check the
    // timestamp around their read of the payload.
    unsafe {
        std::ptr::write_volatile(&raw mut (*header).monotonic_published_at_ns, 0);
        fence(Ordering::SeqCst);
        std::ptr::write_volatile(&raw mut (*header).payload, payload.as_ptr() as u64);
        std::ptr::write_volatile(&raw mut (*header).payload_size, size);
        fence(Ordering::SeqCst);
        std::ptr::write_volatile(
            &raw mut (*header).monotonic_published_at_ns,
            published_at_ns,
        );
    }
    // The old payload goes now: a reader that copied from it sees the
    // timestamp changed and reads again.
    p.payload = payload;
    p.published_at_ns = published_at_ns;
    name(header.cast(), p.len);
}

/// A memfd named `OTEL_CTX`, or `None` where memfds are refused.
fn memfd() -> Option<libc::c_int> {
    let base = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
    // MFD_NOEXEC_SEAL is Linux 6.3+; older kernels refuse the flag.
    for flags in [base | libc::MFD_NOEXEC_SEAL, base] {
        // SAFETY: the name is a NUL-terminated string.
        let fd = unsafe { libc::memfd_create(NAME.as_ptr(), flags) };
        if fd >= 0 {
            return Some(fd);
        }
    }
    None
}

/// Names the mapping `OTEL_CTX` (Linux 5.17+ with `CONFIG_ANON_VMA_NAME`;
/// elsewhere refused, which readers cope with when the memfd names it).
fn name(at: *mut libc::c_void, len: usize) -> bool {
    const PR_SET_VMA: libc::c_int = 0x5356_4d41;
    const PR_SET_VMA_ANON_NAME: libc::c_ulong = 0;
    // SAFETY: names a mapping of this process; no memory is written.
    unsafe {
        libc::prctl(
            PR_SET_VMA,
            PR_SET_VMA_ANON_NAME,
            at as libc::c_ulong,
            len as libc::c_ulong,
            NAME.as_ptr() as libc::c_ulong,
        ) == 0
    }
}

/// The line of `/proc/self/maps` of a process-context mapping, if any
/// (asked before this process publishes its own).
fn foreign_mapping() -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .find(|line| is_process_context_mapping(line))
        .map(str::to_owned)
}

/// Whether a `/proc/PID/maps` line is of a process-context mapping, by
/// the names OTEP 4719's readers look for.
fn is_process_context_mapping(line: &str) -> bool {
    // The path column starts after five fields.
    let name = line.split_whitespace().nth(5).unwrap_or("");
    [
        "[anon_shmem:OTEL_CTX]",
        "[anon:OTEL_CTX]",
        "/memfd:OTEL_CTX",
    ]
    .iter()
    .any(|n| name.starts_with(n))
}

/// The `ProcessContext` payload: `resource` (field 1, a `Resource` whose
/// field 1 is its attributes) and `attributes` (field 2): the
/// `threadlocal.*` keys.
pub(crate) fn payload(resource: &[KeyValue], key_map: &[String]) -> Vec<u8> {
    let mut resource_bytes = Vec::new();
    for kv in resource {
        proto::message(&mut resource_bytes, 1, &proto::key_value(kv));
    }
    let mut out = Vec::new();
    proto::message(&mut out, 1, &resource_bytes);
    let schema = KeyValue::new(SCHEMA_VERSION_KEY, SCHEMA_VERSION);
    proto::message(&mut out, 2, &proto::key_value(&schema));
    let keys = KeyValue::new(
        ATTRIBUTE_KEY_MAP_KEY,
        Value::Array(Array::String(
            key_map.iter().cloned().map(StringValue::from).collect(),
        )),
    );
    proto::message(&mut out, 2, &proto::key_value(&keys));
    out
}

/// Protobuf encoding of the few OTLP common messages the payload holds
/// (`KeyValue`, `AnyValue`, `ArrayValue`).
mod proto {
    use opentelemetry::{Array, KeyValue, Value};

    fn varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    /// A length-delimited field.
    pub(super) fn message(out: &mut Vec<u8>, field: u32, bytes: &[u8]) {
        varint(out, u64::from(field << 3 | 2));
        varint(out, bytes.len() as u64);
        out.extend_from_slice(bytes);
    }

    /// `KeyValue { key = 1; value = 2 }`.
    pub(super) fn key_value(kv: &KeyValue) -> Vec<u8> {
        let mut out = Vec::new();
        message(&mut out, 1, kv.key.as_str().as_bytes());
        message(&mut out, 2, &any_value(&kv.value));
        out
    }

    /// `AnyValue { string 1, bool 2, int 3, double 4, array 5 }`.
    fn any_value(v: &Value) -> Vec<u8> {
        let mut out = Vec::new();
        match v {
            Value::String(s) => message(&mut out, 1, s.as_str().as_bytes()),
            Value::Bool(b) => {
                varint(&mut out, 2 << 3);
                varint(&mut out, u64::from(*b));
            }
            Value::I64(i) => {
                varint(&mut out, 3 << 3);
                varint(&mut out, *i as u64);
            }
            Value::F64(f) => {
                varint(&mut out, 4 << 3 | 1);
                out.extend_from_slice(&f.to_le_bytes());
            }
            Value::Array(a) => {
                let values: Vec<Value> = match a {
                    Array::Bool(v) => v.iter().map(|b| Value::Bool(*b)).collect(),
                    Array::I64(v) => v.iter().map(|i| Value::I64(*i)).collect(),
                    Array::F64(v) => v.iter().map(|f| Value::F64(*f)).collect(),
                    Array::String(v) => v.iter().map(|s| Value::String(s.clone())).collect(),
                    _ => Vec::new(),
                };
                // ArrayValue { repeated AnyValue values = 1 }
                let mut array = Vec::new();
                for v in &values {
                    message(&mut array, 1, &any_value(v));
                }
                message(&mut out, 5, &array);
            }
            // A value kind added after this encoder: its text.
            other => message(&mut out, 1, other.to_string().as_bytes()),
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_is_laid_out_as_otep_4719_says() {
        assert_eq!(std::mem::offset_of!(Header, version), 8);
        assert_eq!(std::mem::offset_of!(Header, payload_size), 12);
        assert_eq!(std::mem::offset_of!(Header, monotonic_published_at_ns), 16);
        assert_eq!(std::mem::offset_of!(Header, payload), 24);
    }

    #[test]
    fn the_payload_encodes_the_resource_and_the_threadlocal_keys() {
        let bytes = payload(
            &[
                KeyValue::new("service.name", "checkout"),
                KeyValue::new("n", 300_i64),
                KeyValue::new("on", true),
            ],
            &["http.route".to_owned()],
        );
        // Field 1 (resource), length-delimited; inside it field 1 (a
        // KeyValue) whose key is "service.name".
        assert_eq!(bytes[0], 0x0a);
        let resource_len = bytes[1] as usize;
        let resource = &bytes[2..2 + resource_len];
        assert_eq!(resource[0], 0x0a);
        assert_eq!(&resource[2..4], &[0x0a, 12]);
        assert_eq!(&resource[4..16], b"service.name");
        // The int 300 as a varint: ac 02.
        let int_at = resource
            .windows(3)
            .position(|w| w == [0x18, 0xac, 0x02])
            .expect("AnyValue.int_value 300");
        assert!(int_at > 16);
        // Then the two threadlocal attributes, as field 2.
        let rest = &bytes[2 + resource_len..];
        assert_eq!(rest[0], 0x12);
        let text = String::from_utf8_lossy(rest);
        assert!(text.contains(SCHEMA_VERSION_KEY) && text.contains(SCHEMA_VERSION));
        assert!(text.contains(ATTRIBUTE_KEY_MAP_KEY) && text.contains("http.route"));
    }

    #[test]
    fn mapping_names_are_recognised_as_readers_do() {
        for name in [
            "[anon_shmem:OTEL_CTX]",
            "[anon:OTEL_CTX]",
            "/memfd:OTEL_CTX (deleted)",
        ] {
            let line = format!("7f0000000000-7f0000001000 r--p 00000000 00:01 42   {name}");
            assert!(is_process_context_mapping(&line), "{line}");
        }
        assert!(!is_process_context_mapping(
            "7f0000000000-7f0000001000 rw-p 00000000 00:00 0   [anon:other]"
        ));
        assert!(!is_process_context_mapping(
            "7f0000000000-7f0000001000 rw-p 00000000 00:00 0"
        ));
    }
}
