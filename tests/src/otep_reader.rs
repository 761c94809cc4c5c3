// SPDX-License-Identifier: Apache-2.0 OR MIT
//! An out-of-process reader of OpenTelemetry's process context and thread
//! context, written from the two specification texts only, so that it can
//! check any writer of them (kspan's included) from the outside:
//!
//! - OTEP 4719, *Process Context: Sharing Resource Attributes with External
//!   Readers* (`oteps/profiles/4719-process-ctx.md` of
//!   opentelemetry-specification): the `OTEL_CTX` mapping found through
//!   `/proc/PID/maps`, its 32-byte header and its `ProcessContext` protobuf
//!   payload, read with `process_vm_readv` by the "Reading Protocol" (fences,
//!   `monotonic_published_at_ns` checked before and after, retries).
//! - OTEP 4947, *Thread Context: Sharing Thread-Level Information with
//!   External Readers* (`oteps/profiles/4947-thread-ctx.md`): the
//!   `threadlocal.schema_version` and `threadlocal.attribute_key_map` entries
//!   of the process context's attributes, the `otel_thread_ctx_v1` TLS symbol
//!   of the dynamic symbol table, and each thread's Thread-Local Context
//!   Record (28 bytes, then `attrs-data-size` bytes of key/length/value
//!   entries), read while every thread of the process is ptrace-stopped.
//!
//! Nothing here uses kspan: the ELF tables, the protobuf messages and the
//! thread pointer arithmetic are decoded by hand from those texts (and the
//! ELF and x86-64 TLS ABI layouts they rely on). Linux only; the thread
//! context only on x86-64, and only when the symbol is defined by the
//! executable (see [`snapshot`]).

use std::fs;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{fence, Ordering};
use std::time::{Duration, Instant};

/// The name of the thread-local variable (OTEP 4947).
pub const THREAD_CTX_SYMBOL: &str = "otel_thread_ctx_v1";
/// The process context attribute holding the thread context's schema.
pub const SCHEMA_VERSION_KEY: &str = "threadlocal.schema_version";
/// The process context attribute holding the key indexes' names.
pub const KEY_MAP_KEY: &str = "threadlocal.attribute_key_map";
/// The process context header version this reader supports (OTEP 4719:
/// "currently `2`").
pub const SUPPORTED_VERSION: u32 = 2;

/// The names a process context mapping can have in `/proc/PID/maps` (a
/// mapping's name *starts with* one of them).
const MAPPING_NAMES: [&str; 3] = [
    "[anon_shmem:OTEL_CTX]",
    "[anon:OTEL_CTX]",
    "/memfd:OTEL_CTX",
];
const SIGNATURE: &[u8; 8] = b"OTEL_CTX";
/// signature (8), version (4), payload_size (4), monotonic_published_at_ns
/// (8), payload (8).
const HEADER_LEN: usize = 32;
const OFF_VERSION: usize = 8;
const OFF_PAYLOAD_SIZE: usize = 12;
const OFF_PUBLISHED: usize = 16;
const OFF_PAYLOAD: usize = 24;
/// A bound on the payload this reader copies (the spec expects "the KB
/// range"); a larger `payload_size` is reported, not allocated.
const MAX_PAYLOAD: u32 = 16 << 20;
/// Consistent-read attempts of [`read_process_context`].
const READ_ATTEMPTS: u32 = 200;
/// The thread record's fixed part: trace-id (16), span-id (8), valid (1),
/// trace-flags (1), attrs-data-size (2).
const RECORD_HEADER_LEN: usize = 28;
/// How long a thread gets to reach its ptrace-stop.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

// ---------------------------------------------------------------------------
// What is read
// ---------------------------------------------------------------------------

/// An OpenTelemetry `AnyValue` as decoded from the payload.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `string_value` (field 1).
    Str(String),
    /// `bool_value` (field 2).
    Bool(bool),
    /// `int_value` (field 3).
    Int(i64),
    /// `double_value` (field 4).
    Double(f64),
    /// `array_value` (field 5): `ArrayValue.values`, in order.
    Array(Vec<Value>),
    /// Any other member (`kvlist_value`, `bytes_value`, newer ones), or no
    /// member set.
    Other,
}

impl Value {
    /// The string, when this is a string value.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// A process context read consistently (OTEP 4719's Reading Protocol).
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessContextRead {
    /// The mapping's name as `/proc/PID/maps` shows it, e.g.
    /// `[anon_shmem:OTEL_CTX]`, `[anon:OTEL_CTX]` or
    /// `/memfd:OTEL_CTX (deleted)`.
    pub mapping_name: String,
    /// Where the mapping (and so the header) starts in the process.
    pub mapping_start: u64,
    /// The header's `version`.
    pub version: u32,
    /// The header's `monotonic_published_at_ns` (the same before and after
    /// the payload was copied).
    pub published_at_ns: u64,
    /// `ProcessContext.resource.attributes`, in order.
    pub resource: Vec<(String, Value)>,
    /// `ProcessContext.attributes`, in order.
    pub attributes: Vec<(String, Value)>,
}

impl ProcessContextRead {
    /// The first of `ProcessContext.attributes` named `key`.
    pub fn attribute(&self, key: &str) -> Option<&Value> {
        first(&self.attributes, key)
    }

    /// The first resource attribute named `key`.
    pub fn resource_attribute(&self, key: &str) -> Option<&Value> {
        first(&self.resource, key)
    }

    /// `threadlocal.schema_version`, when it is a string.
    pub fn schema_version(&self) -> Option<&str> {
        self.attribute(SCHEMA_VERSION_KEY).and_then(Value::as_str)
    }

    /// `threadlocal.attribute_key_map`: the attribute name of each key
    /// index (index `i` is element `i`). Empty when the attribute is absent
    /// or not an array; an element that is not a string keeps its index as
    /// an empty name.
    pub fn key_map(&self) -> Vec<String> {
        match self.attribute(KEY_MAP_KEY) {
            Some(Value::Array(values)) => values
                .iter()
                .map(|v| v.as_str().unwrap_or_default().to_owned())
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Whether any attribute is one of OTEP 4947's `threadlocal.` keys.
    pub fn has_thread_local_keys(&self) -> bool {
        self.attributes
            .iter()
            .any(|(k, _)| k.starts_with("threadlocal."))
    }

    /// A string resource attribute.
    pub fn resource_str(&self, key: &str) -> Option<&str> {
        self.resource_attribute(key).and_then(Value::as_str)
    }
}

fn first<'a>(list: &'a [(String, Value)], key: &str) -> Option<&'a Value> {
    list.iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

/// A Thread-Local Context Record (OTEP 4947), as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadRecordRead {
    /// `trace-id`.
    pub trace_id: [u8; 16],
    /// `span-id`.
    pub span_id: [u8; 8],
    /// `valid`: 1 is a valid record, anything else is not.
    pub valid: u8,
    /// `trace-flags`.
    pub trace_flags: u8,
    /// `attrs-data-size`.
    pub attrs_data_size: u16,
    /// The complete `attrs-data` entries (key index, value bytes), in
    /// order, duplicates and unknown keys included; parsing stopped at the
    /// first entry the buffer could not hold. Empty when the record is not
    /// valid (its attributes are then not read).
    pub attrs: Vec<(u8, Vec<u8>)>,
}

impl ThreadRecordRead {
    /// Whether `valid` is 1.
    pub fn is_valid(&self) -> bool {
        self.valid == 1
    }

    /// The attributes resolved against `key_map` as the spec says: entries
    /// whose index is outside the map are ignored, and of a key index that
    /// appears more than once the last value is used (at the place of its
    /// first appearance). Values are UTF-8, invalid sequences replaced.
    pub fn attributes(&self, key_map: &[String]) -> Vec<(String, String)> {
        let mut resolved: Vec<(u8, String)> = Vec::new();
        for (key, value) in &self.attrs {
            if usize::from(*key) >= key_map.len() {
                continue;
            }
            let value = String::from_utf8_lossy(value).into_owned();
            match resolved.iter_mut().find(|(k, _)| k == key) {
                Some(slot) => slot.1 = value,
                None => resolved.push((*key, value)),
            }
        }
        resolved
            .into_iter()
            .map(|(k, v)| (key_map[usize::from(k)].clone(), v))
            .collect()
    }
}

/// One thread's `otel_thread_ctx_v1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadRead {
    /// The thread's id.
    pub tid: i32,
    /// The variable's value: the record's address, or 0.
    pub record_pointer: u64,
    /// The record it points at; `None` when the pointer is NULL.
    pub record: Option<ThreadRecordRead>,
}

/// Where `otel_thread_ctx_v1` lives, as found in the executable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSymbol {
    /// The module defining it (the executable, as `/proc/PID/exe` names it).
    pub module: String,
    /// The symbol's `st_value`: its offset in the module's TLS block.
    pub st_value: u64,
    /// The symbol's `st_size`.
    pub st_size: u64,
    /// The module's `PT_TLS` `p_memsz`.
    pub tls_memsz: u64,
    /// The module's `PT_TLS` `p_align`.
    pub tls_align: u64,
    /// The variable's address minus the thread pointer (negative: TLS
    /// variant II puts the executable's block just below it).
    pub tp_offset: i64,
}

/// What [`snapshot`] saw while every thread of the process was stopped.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// The process context, if the process publishes one.
    pub process: Option<ProcessContextRead>,
    /// `otel_thread_ctx_v1`, when the process context has `threadlocal.*`
    /// keys and the executable defines the symbol.
    pub tls_symbol: Option<TlsSymbol>,
    /// Every thread that was stopped, in the order they were.
    pub stopped: Vec<i32>,
    /// Each stopped thread's variable, when `tls_symbol` is known (empty
    /// otherwise).
    pub threads: Vec<ThreadRead>,
}

// ---------------------------------------------------------------------------
// Process context (OTEP 4719)
// ---------------------------------------------------------------------------

/// A failure, and whether trying again later may succeed (the context was
/// being updated).
#[derive(Debug)]
enum Fail {
    Busy(String),
    Hard(String),
}

impl From<String> for Fail {
    fn from(message: String) -> Fail {
        Fail::Hard(message)
    }
}

impl Fail {
    fn message(self) -> String {
        match self {
            Fail::Busy(m) | Fail::Hard(m) => m,
        }
    }
}

/// Reads the process context of `pid` by OTEP 4719's Reading Protocol:
/// every mapping of `/proc/PID/maps` whose name starts with
/// `[anon_shmem:OTEL_CTX]`, `[anon:OTEL_CTX]` or `/memfd:OTEL_CTX` whose
/// first 8 bytes are `OTEL_CTX` and whose version is 2 holds one; its
/// header is read, `monotonic_published_at_ns` must be non-zero, a fence,
/// the `payload` and `payload_size` fields are read again and the payload
/// copied, a fence, and `monotonic_published_at_ns` must still be the same,
/// or all of it is tried again (up to 200 times). `Ok(None)`: no mapping
/// holds a context. An error: reading or decoding failed, the context stayed
/// mid-update, or more than one mapping holds one (the spec allows one).
pub fn read_process_context(pid: i32) -> Result<Option<ProcessContextRead>, String> {
    read_context(pid, READ_ATTEMPTS).map_err(Fail::message)
}

fn read_context(pid: i32, attempts: u32) -> Result<Option<ProcessContextRead>, Fail> {
    let maps_path = format!("/proc/{pid}/maps");
    let maps = fs::read_to_string(&maps_path).map_err(|e| format!("{maps_path}: {e}"))?;
    let mut found = Vec::new();
    for entry in maps.lines().filter_map(parse_maps_line) {
        if !is_context_mapping_name(&entry.pathname)
            || entry.end.saturating_sub(entry.start) < HEADER_LEN as u64
        {
            continue;
        }
        if let Some(context) = read_mapping(pid, &entry, attempts)? {
            found.push(context);
        }
    }
    if found.len() > 1 {
        let all: Vec<String> = found
            .iter()
            .map(|c| format!("{} at {:#x}", c.mapping_name, c.mapping_start))
            .collect();
        return Err(Fail::Hard(format!(
            "pid {pid}: {} mappings hold a process context ({}); OTEP 4719 allows one",
            found.len(),
            all.join(", ")
        )));
    }
    Ok(found.pop())
}

fn read_mapping(
    pid: i32,
    entry: &MapsEntry,
    attempts: u32,
) -> Result<Option<ProcessContextRead>, Fail> {
    let at = entry.start;
    let what = format!("pid {pid}: {} at {at:#x}", entry.pathname);
    let mut why = String::from("no attempt");
    for attempt in 0..attempts {
        if attempt > 0 {
            back_off(attempt);
        }
        // 2. Signature and version.
        let header =
            read_memory(pid, at, HEADER_LEN).map_err(|e| format!("{what}: header: {e}"))?;
        if &header[..8] != SIGNATURE {
            return Ok(None);
        }
        let version = u32_at(&header, OFF_VERSION);
        if version != SUPPORTED_VERSION {
            return Ok(None);
        }
        // 3. The rest of the header: published, not mid-update.
        let published = u64_at(&header, OFF_PUBLISHED);
        if published == 0 {
            why = "monotonic_published_at_ns is 0 (an update in progress)".into();
            continue;
        }
        // 4.
        fence(Ordering::SeqCst);
        // 5. `payload` and `payload_size`, then the payload.
        let fields =
            read_memory(pid, at, HEADER_LEN).map_err(|e| format!("{what}: header: {e}"))?;
        let size = u32_at(&fields, OFF_PAYLOAD_SIZE);
        let pointer = u64_at(&fields, OFF_PAYLOAD);
        let payload = if size > MAX_PAYLOAD {
            Err(format!("payload_size {size} is over {MAX_PAYLOAD}"))
        } else {
            read_memory(pid, pointer, size as usize)
                .map_err(|e| format!("payload ({size} bytes at {pointer:#x}): {e}"))
        };
        // 6.
        fence(Ordering::SeqCst);
        // 7. Re-verify.
        let again = read_memory(pid, at + OFF_PUBLISHED as u64, 8)
            .map_err(|e| format!("{what}: monotonic_published_at_ns: {e}"))?;
        let again = u64_at(&again, 0);
        if again != published {
            why = format!("monotonic_published_at_ns changed from {published} to {again}");
            continue;
        }
        let payload = payload.map_err(|e| format!("{what}: {e}"))?;
        // 8. Decode.
        let (resource, attributes) =
            decode_process_context(&payload).map_err(|e| format!("{what}: payload: {e}"))?;
        return Ok(Some(ProcessContextRead {
            mapping_name: entry.pathname.clone(),
            mapping_start: at,
            version,
            published_at_ns: published,
            resource,
            attributes,
        }));
    }
    Err(Fail::Busy(format!(
        "{what}: no consistent read in {attempts} attempts: {why}"
    )))
}

fn back_off(attempt: u32) {
    if attempt < 10 {
        std::thread::yield_now();
    } else {
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut b = [0; 4];
    b.copy_from_slice(&bytes[at..at + 4]);
    u32::from_ne_bytes(b)
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut b = [0; 8];
    b.copy_from_slice(&bytes[at..at + 8]);
    u64::from_ne_bytes(b)
}

/// Copies `len` bytes at `addr` of process `pid` with `process_vm_readv`.
fn read_memory(pid: i32, addr: u64, len: usize) -> Result<Vec<u8>, String> {
    let mut buf = vec![0u8; len];
    let mut done = 0;
    while done < len {
        let remote_addr = addr
            .checked_add(done as u64)
            .ok_or_else(|| format!("{len} bytes at {addr:#x} wrap around"))?;
        let local = libc::iovec {
            iov_base: buf[done..].as_mut_ptr().cast(),
            iov_len: len - done,
        };
        let remote = libc::iovec {
            iov_base: remote_addr as *mut libc::c_void,
            iov_len: len - done,
        };
        // SAFETY: `local` describes the writable tail of `buf`, which lives
        // across the call; the remote iovec is only an address in the other
        // process, which the kernel checks (EFAULT), never dereferenced here.
        let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
        if n < 0 {
            return Err(format!(
                "process_vm_readv(pid {pid}, {len} bytes at {addr:#x}): {}",
                io::Error::last_os_error()
            ));
        }
        if n == 0 {
            return Err(format!(
                "process_vm_readv(pid {pid}, {len} bytes at {addr:#x}): read nothing at {remote_addr:#x}"
            ));
        }
        done += n as usize;
    }
    Ok(buf)
}

// ---------------------------------------------------------------------------
// /proc/PID/maps
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq)]
struct MapsEntry {
    start: u64,
    end: u64,
    /// Everything after the inode, leading blanks removed (may hold
    /// blanks itself, e.g. ` (deleted)`).
    pathname: String,
}

fn next_token<'a>(rest: &mut &'a str) -> Option<&'a str> {
    let s = rest.trim_start_matches([' ', '\t']);
    let end = s.find([' ', '\t']).unwrap_or(s.len());
    let (token, tail) = s.split_at(end);
    *rest = tail;
    (!token.is_empty()).then_some(token)
}

/// One line of `/proc/PID/maps`: `start-end perms offset dev inode
/// pathname`.
fn parse_maps_line(line: &str) -> Option<MapsEntry> {
    let mut rest = line;
    let (start, end) = next_token(&mut rest)?.split_once('-')?;
    let _perms = next_token(&mut rest)?;
    u64::from_str_radix(next_token(&mut rest)?, 16).ok()?; // offset
    next_token(&mut rest)?.split_once(':')?; // device
    next_token(&mut rest)?.parse::<u64>().ok()?; // inode
    Some(MapsEntry {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        pathname: rest.trim_start_matches([' ', '\t']).to_owned(),
    })
}

fn is_context_mapping_name(name: &str) -> bool {
    MAPPING_NAMES.iter().any(|prefix| name.starts_with(prefix))
}

// ---------------------------------------------------------------------------
// Protobuf (ProcessContext, Resource, KeyValue, AnyValue, ArrayValue)
// ---------------------------------------------------------------------------

const WIRE_VARINT: u8 = 0;
const WIRE_FIXED64: u8 = 1;
const WIRE_LEN: u8 = 2;
const WIRE_FIXED32: u8 = 5;
/// How deep arrays may nest before the payload is refused.
const MAX_DEPTH: u32 = 32;

struct Pb<'a> {
    buf: &'a [u8],
    pos: usize,
    message: &'static str,
}

impl<'a> Pb<'a> {
    fn new(buf: &'a [u8], message: &'static str) -> Pb<'a> {
        Pb {
            buf,
            pos: 0,
            message,
        }
    }

    fn more(&self) -> bool {
        self.pos < self.buf.len()
    }

    fn error(&self, what: impl std::fmt::Display) -> String {
        format!("{} at byte {}: {what}", self.message, self.pos)
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut value = 0u64;
        for i in 0..10 {
            let Some(&byte) = self.buf.get(self.pos) else {
                return Err(self.error("varint cut short"));
            };
            self.pos += 1;
            if i == 9 && byte > 1 {
                return Err(self.error("varint over 64 bits"));
            }
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(self.error("varint longer than 10 bytes"))
    }

    fn take(&mut self, n: u64) -> Result<&'a [u8], String> {
        let left = self.buf.len() - self.pos;
        if n > left as u64 {
            return Err(self.error(format!("{n} bytes wanted, {left} left")));
        }
        let n = n as usize;
        let bytes = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(bytes)
    }

    /// A field's number and wire type.
    fn tag(&mut self) -> Result<(u64, u8), String> {
        let tag = self.varint()?;
        let field = tag >> 3;
        if field == 0 {
            return Err(self.error("field number 0"));
        }
        Ok((field, (tag & 7) as u8))
    }

    fn len_delimited(&mut self) -> Result<&'a [u8], String> {
        let n = self.varint()?;
        self.take(n)
    }

    fn skip(&mut self, wire: u8) -> Result<(), String> {
        match wire {
            WIRE_VARINT => self.varint().map(drop),
            WIRE_FIXED64 => self.take(8).map(drop),
            WIRE_LEN => self.len_delimited().map(drop),
            WIRE_FIXED32 => self.take(4).map(drop),
            other => Err(self.error(format!(
                "wire type {other} (groups or invalid) in an unknown field"
            ))),
        }
    }

    fn expect(&self, field: u64, wire: u8, want: u8) -> Result<(), String> {
        if wire == want {
            Ok(())
        } else {
            Err(self.error(format!(
                "field {field} has wire type {wire}, expected {want}"
            )))
        }
    }

    fn string(&mut self, field: u64) -> Result<String, String> {
        let bytes = self.len_delimited()?;
        String::from_utf8(bytes.to_vec())
            .map_err(|e| self.error(format!("field {field} is not UTF-8: {e}")))
    }
}

/// Attributes of a `Resource` and of `ProcessContext.attributes`.
type Attributes = Vec<(String, Value)>;

/// `ProcessContext`: `Resource resource = 1`, `repeated KeyValue
/// attributes = 2`; other fields are skipped.
fn decode_process_context(buf: &[u8]) -> Result<(Attributes, Attributes), String> {
    let mut pb = Pb::new(buf, "ProcessContext");
    let (mut resource, mut attributes) = (Vec::new(), Vec::new());
    while pb.more() {
        let (field, wire) = pb.tag()?;
        match field {
            1 => {
                pb.expect(field, wire, WIRE_LEN)?;
                // A repeated message field merges: attributes add up.
                resource.extend(decode_resource(pb.len_delimited()?)?);
            }
            2 => {
                pb.expect(field, wire, WIRE_LEN)?;
                attributes.push(decode_key_value(pb.len_delimited()?)?);
            }
            _ => pb.skip(wire)?,
        }
    }
    Ok((resource, attributes))
}

/// `Resource`: `repeated KeyValue attributes = 1`.
fn decode_resource(buf: &[u8]) -> Result<Attributes, String> {
    let mut pb = Pb::new(buf, "Resource");
    let mut attributes = Vec::new();
    while pb.more() {
        let (field, wire) = pb.tag()?;
        if field == 1 {
            pb.expect(field, wire, WIRE_LEN)?;
            attributes.push(decode_key_value(pb.len_delimited()?)?);
        } else {
            pb.skip(wire)?;
        }
    }
    Ok(attributes)
}

/// `KeyValue`: `string key = 1`, `AnyValue value = 2`.
fn decode_key_value(buf: &[u8]) -> Result<(String, Value), String> {
    let mut pb = Pb::new(buf, "KeyValue");
    let (mut key, mut value) = (String::new(), Value::Other);
    while pb.more() {
        let (field, wire) = pb.tag()?;
        match field {
            1 => {
                pb.expect(field, wire, WIRE_LEN)?;
                key = pb.string(field)?;
            }
            2 => {
                pb.expect(field, wire, WIRE_LEN)?;
                value = merge(value, decode_any_value(pb.len_delimited()?, 0)?);
            }
            _ => pb.skip(wire)?,
        }
    }
    Ok((key, value))
}

/// A message field seen twice merges; for `AnyValue` that matters only to
/// two arrays (their values add up), otherwise the last member wins.
fn merge(before: Value, after: Value) -> Value {
    match (before, after) {
        (Value::Array(mut a), Value::Array(b)) => {
            a.extend(b);
            Value::Array(a)
        }
        (_, after) => after,
    }
}

/// `AnyValue`: the oneof `string_value = 1`, `bool_value = 2`, `int_value
/// = 3`, `double_value = 4`, `array_value = 5`, `kvlist_value = 6`,
/// `bytes_value = 7`; fields it does not know are skipped.
fn decode_any_value(buf: &[u8], depth: u32) -> Result<Value, String> {
    if depth > MAX_DEPTH {
        return Err(format!("AnyValue: arrays nested over {MAX_DEPTH} deep"));
    }
    let mut pb = Pb::new(buf, "AnyValue");
    let mut value = Value::Other;
    while pb.more() {
        let (field, wire) = pb.tag()?;
        match field {
            1 => {
                pb.expect(field, wire, WIRE_LEN)?;
                value = Value::Str(pb.string(field)?);
            }
            2 => {
                pb.expect(field, wire, WIRE_VARINT)?;
                value = Value::Bool(pb.varint()? != 0);
            }
            3 => {
                pb.expect(field, wire, WIRE_VARINT)?;
                // int64: two's complement in a 64-bit varint.
                value = Value::Int(pb.varint()? as i64);
            }
            4 => {
                pb.expect(field, wire, WIRE_FIXED64)?;
                let mut b = [0; 8];
                b.copy_from_slice(pb.take(8)?);
                value = Value::Double(f64::from_bits(u64::from_le_bytes(b)));
            }
            5 => {
                pb.expect(field, wire, WIRE_LEN)?;
                let values = decode_array(pb.len_delimited()?, depth + 1)?;
                value = merge(value, Value::Array(values));
            }
            6 | 7 => {
                pb.expect(field, wire, WIRE_LEN)?;
                pb.len_delimited()?;
                value = Value::Other;
            }
            _ => pb.skip(wire)?,
        }
    }
    Ok(value)
}

/// `ArrayValue`: `repeated AnyValue values = 1`.
fn decode_array(buf: &[u8], depth: u32) -> Result<Vec<Value>, String> {
    let mut pb = Pb::new(buf, "ArrayValue");
    let mut values = Vec::new();
    while pb.more() {
        let (field, wire) = pb.tag()?;
        if field == 1 {
            pb.expect(field, wire, WIRE_LEN)?;
            values.push(decode_any_value(pb.len_delimited()?, depth)?);
        } else {
            pb.skip(wire)?;
        }
    }
    Ok(values)
}

// ---------------------------------------------------------------------------
// Thread-Local Context Record (OTEP 4947)
// ---------------------------------------------------------------------------

/// The record's fixed 28 bytes (multi-byte fields in host byte order);
/// `attrs` left empty.
fn parse_record_header(bytes: &[u8; RECORD_HEADER_LEN]) -> ThreadRecordRead {
    let mut trace_id = [0; 16];
    trace_id.copy_from_slice(&bytes[..16]);
    let mut span_id = [0; 8];
    span_id.copy_from_slice(&bytes[16..24]);
    ThreadRecordRead {
        trace_id,
        span_id,
        valid: bytes[24],
        trace_flags: bytes[25],
        attrs_data_size: u16::from_ne_bytes([bytes[26], bytes[27]]),
        attrs: Vec::new(),
    }
}

/// `attrs-data`: entries of key (u8), length (u8) and `length` value
/// bytes, packed; parsing stops where the rest cannot hold a complete
/// entry.
fn parse_attrs_data(data: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut entries = Vec::new();
    let mut rest = data;
    while let [key, len, tail @ ..] = rest {
        let len = usize::from(*len);
        if tail.len() < len {
            break;
        }
        entries.push((*key, tail[..len].to_vec()));
        rest = &tail[len..];
    }
    entries
}

// ---------------------------------------------------------------------------
// ELF (64-bit little-endian)
// ---------------------------------------------------------------------------

#[cfg(test)]
const SHT_SYMTAB: u32 = 2;
const SHT_DYNSYM: u32 = 11;
const PT_TLS: u32 = 7;
const STT_TLS: u8 = 6;
const SHN_UNDEF: u16 = 0;
const EM_X86_64: u16 = 62;
const SYM_LEN: u64 = 24;

struct Elf {
    file: fs::File,
    name: String,
    len: u64,
    machine: u16,
    phoff: u64,
    phentsize: u16,
    phnum: u16,
    shoff: u64,
    shentsize: u16,
    shnum: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct ElfSymbol {
    name: String,
    value: u64,
    size: u64,
    /// `st_info & 0xf`.
    kind: u8,
    shndx: u16,
}

impl ElfSymbol {
    fn defined(&self) -> bool {
        self.shndx != SHN_UNDEF
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Section {
    kind: u32,
    offset: u64,
    size: u64,
    link: u32,
    entsize: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TlsSegment {
    vaddr: u64,
    memsz: u64,
    align: u64,
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn le32(b: &[u8], at: usize) -> u32 {
    let mut a = [0; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn le64(b: &[u8], at: usize) -> u64 {
    let mut a = [0; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

impl Elf {
    /// Opens `path` (named `name` in errors); `Ok(None)` when it is not a
    /// 64-bit little-endian ELF file.
    fn open(path: &Path, name: &str) -> Result<Option<Elf>, String> {
        let file = fs::File::open(path).map_err(|e| format!("{name}: {e}"))?;
        let len = file.metadata().map_err(|e| format!("{name}: {e}"))?.len();
        if len < 64 {
            return Ok(None);
        }
        let mut h = [0u8; 64];
        file.read_exact_at(&mut h, 0)
            .map_err(|e| format!("{name}: ELF header: {e}"))?;
        // e_ident: magic, EI_CLASS 2 (64-bit), EI_DATA 1 (little-endian).
        if &h[..4] != b"\x7fELF" || h[4] != 2 || h[5] != 1 {
            return Ok(None);
        }
        let mut elf = Elf {
            file,
            name: name.to_owned(),
            len,
            machine: le16(&h, 18),
            phoff: le64(&h, 32),
            phentsize: le16(&h, 54),
            phnum: le16(&h, 56),
            shoff: le64(&h, 40),
            shentsize: le16(&h, 58),
            shnum: u64::from(le16(&h, 60)),
        };
        if elf.shoff != 0 && elf.shentsize < 64 {
            return Err(format!("{name}: e_shentsize {} < 64", elf.shentsize));
        }
        if elf.phnum != 0 && elf.phentsize < 56 {
            return Err(format!("{name}: e_phentsize {} < 56", elf.phentsize));
        }
        if elf.shoff != 0 && elf.shnum == 0 {
            // Over 0xff00 sections: the count is section 0's sh_size.
            let zero = elf.read(elf.shoff, 64, "section header 0")?;
            elf.shnum = le64(&zero, 32);
        }
        Ok(Some(elf))
    }

    fn read(&self, offset: u64, len: u64, what: &str) -> Result<Vec<u8>, String> {
        let name = &self.name;
        if offset.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(format!(
                "{name}: {what}: {len} bytes at {offset:#x} are past the file's {} bytes",
                self.len
            ));
        }
        let mut buf = vec![0u8; len as usize];
        self.file
            .read_exact_at(&mut buf, offset)
            .map_err(|e| format!("{name}: {what}: {e}"))?;
        Ok(buf)
    }

    fn sections(&self) -> Result<Vec<Section>, String> {
        if self.shoff == 0 {
            return Ok(Vec::new());
        }
        let size = u64::from(self.shentsize);
        let table = self.read(
            self.shoff,
            self.shnum.saturating_mul(size),
            "section headers",
        )?;
        Ok(table
            .chunks_exact(size as usize)
            .map(|s| Section {
                kind: le32(s, 4),
                offset: le64(s, 24),
                size: le64(s, 32),
                link: le32(s, 40),
                entsize: le64(s, 56),
            })
            .collect())
    }

    /// Every symbol of the tables of type `kind` (`SHT_DYNSYM`: `.dynsym`;
    /// `SHT_SYMTAB`: `.symtab`), with names from their linked string
    /// tables.
    fn symbols(&self, kind: u32) -> Result<Vec<ElfSymbol>, String> {
        let sections = self.sections()?;
        let mut symbols = Vec::new();
        for table in sections.iter().filter(|s| s.kind == kind) {
            if table.entsize != SYM_LEN {
                return Err(format!(
                    "{}: symbol table's sh_entsize is {}, not {SYM_LEN}",
                    self.name, table.entsize
                ));
            }
            let strtab = sections.get(table.link as usize).ok_or_else(|| {
                format!(
                    "{}: symbol table links to section {}, of {}",
                    self.name,
                    table.link,
                    sections.len()
                )
            })?;
            let syms = self.read(table.offset, table.size, "symbol table")?;
            let strings = self.read(strtab.offset, strtab.size, "string table")?;
            for s in syms.chunks_exact(SYM_LEN as usize) {
                let at = le32(s, 0) as usize;
                let name = strings
                    .get(at..)
                    .and_then(|tail| tail.split(|&b| b == 0).next())
                    .ok_or_else(|| {
                        format!(
                            "{}: a symbol name at {at} is past its string table",
                            self.name
                        )
                    })?;
                symbols.push(ElfSymbol {
                    name: String::from_utf8_lossy(name).into_owned(),
                    kind: s[4] & 0xf,
                    shndx: le16(s, 6),
                    value: le64(s, 8),
                    size: le64(s, 16),
                });
            }
        }
        Ok(symbols)
    }

    /// The `PT_TLS` program header, if any.
    fn tls_segment(&self) -> Result<Option<TlsSegment>, String> {
        let size = u64::from(self.phentsize);
        let table = self.read(self.phoff, u64::from(self.phnum) * size, "program headers")?;
        Ok(table
            .chunks_exact(size as usize)
            .find(|p| le32(p, 0) == PT_TLS)
            .map(|p| TlsSegment {
                vaddr: le64(p, 16),
                memsz: le64(p, 40),
                align: le64(p, 48),
            }))
    }
}

/// TLS variant II (x86-64): the executable's block (TLS module 1) ends at
/// the thread pointer, starting `round_up(p_memsz, p_align)` below it, and a
/// symbol's `st_value` is its offset in the block.
fn variant_ii_offset(st_value: u64, st_size: u64, tls: &TlsSegment) -> Result<i64, String> {
    let align = tls.align.max(1);
    if !align.is_power_of_two() {
        return Err(format!("PT_TLS p_align {align} is not a power of two"));
    }
    if tls.vaddr % align != 0 {
        return Err(format!(
            "PT_TLS p_vaddr {:#x} is not a multiple of its p_align {align}: where the block starts then depends on the C library, which this reader does not follow",
            tls.vaddr
        ));
    }
    if st_value
        .checked_add(st_size)
        .is_none_or(|end| end > tls.memsz)
    {
        return Err(format!(
            "the symbol ({st_size} bytes at {st_value:#x}) is outside PT_TLS's {} bytes",
            tls.memsz
        ));
    }
    let block = tls
        .memsz
        .checked_next_multiple_of(align)
        .filter(|b| *b <= i64::MAX as u64)
        .ok_or_else(|| format!("PT_TLS p_memsz {:#x} is too large", tls.memsz))?;
    Ok(st_value as i64 - block as i64)
}

/// Finds `otel_thread_ctx_v1` in the `.dynsym` of the executable of `pid`
/// and of the libraries it has mapped. `Ok(None)`: nowhere. An error when
/// it is a library that defines it (another TLS module than the
/// executable's; not handled), when it is not `STT_TLS`, or when the
/// executable's TLS layout is not one this reader handles.
fn find_tls_symbol(pid: i32) -> Result<Option<TlsSymbol>, String> {
    let exe_link = format!("/proc/{pid}/exe");
    let exe_name = fs::read_link(&exe_link)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| exe_link.clone());
    let label = format!("{exe_name} (the executable of pid {pid})");
    let exe = Elf::open(Path::new(&exe_link), &label)?
        .ok_or_else(|| format!("{label}: not a 64-bit little-endian ELF file"))?;
    let defined = exe
        .symbols(SHT_DYNSYM)?
        .into_iter()
        .find(|s| s.name == THREAD_CTX_SYMBOL && s.defined());
    if let Some(sym) = defined {
        if sym.kind != STT_TLS {
            return Err(format!(
                "{label}: {THREAD_CTX_SYMBOL} in .dynsym has symbol type {}, not STT_TLS ({STT_TLS})",
                sym.kind
            ));
        }
        if exe.machine != EM_X86_64 {
            return Err(format!(
                "{label}: e_machine {}: only x86-64 ({EM_X86_64}) is handled",
                exe.machine
            ));
        }
        let tls = exe.tls_segment()?.ok_or_else(|| {
            format!("{label}: defines the TLS symbol {THREAD_CTX_SYMBOL} but has no PT_TLS")
        })?;
        let tp_offset = variant_ii_offset(sym.value, sym.size, &tls)
            .map_err(|e| format!("{label}: {THREAD_CTX_SYMBOL}: {e}"))?;
        return Ok(Some(TlsSymbol {
            module: exe_name,
            st_value: sym.value,
            st_size: sym.size,
            tls_memsz: tls.memsz,
            tls_align: tls.align,
            tp_offset,
        }));
    }
    let maps_path = format!("/proc/{pid}/maps");
    let maps = fs::read_to_string(&maps_path).map_err(|e| format!("{maps_path}: {e}"))?;
    let mut seen = Vec::new();
    for entry in maps.lines().filter_map(parse_maps_line) {
        let path = entry.pathname;
        // Files only (a deleted one is not reachable by its name).
        if !path.starts_with('/') || path.ends_with(" (deleted)") || path == exe_name {
            continue;
        }
        if seen.contains(&path) {
            continue;
        }
        seen.push(path.clone());
        let in_root = format!("/proc/{pid}/root{path}");
        // Only regular files: opening a mapped device could have effects.
        if !fs::metadata(&in_root).is_ok_and(|m| m.is_file()) {
            continue;
        }
        let Some(lib) = Elf::open(Path::new(&in_root), &path)? else {
            continue;
        };
        if lib
            .symbols(SHT_DYNSYM)?
            .iter()
            .any(|s| s.name == THREAD_CTX_SYMBOL && s.defined())
        {
            return Err(format!(
                "{THREAD_CTX_SYMBOL} is defined by {path}, a library mapped by pid {pid}: a TLS module other than the executable's (module 1), which this reader does not handle"
            ));
        }
    }
    Ok(None)
}

// ---------------------------------------------------------------------------
// Stopping the process (ptrace)
// ---------------------------------------------------------------------------

#[derive(Debug)]
struct Tracee {
    tid: i32,
    /// Seen in a ptrace-stop.
    stopped: bool,
    /// A signal whose delivery the stop held back, given back at detach.
    signal: i32,
}

enum Stop {
    /// In a ptrace-stop; the signal it holds back (0: none).
    Stopped(i32),
    /// The thread exited.
    Gone,
}

/// The threads of a process this thread has seized; detached on drop.
struct Stopped {
    pid: i32,
    tracees: Vec<Tracee>,
}

fn errno() -> io::Error {
    io::Error::last_os_error()
}

fn task_ids(pid: i32) -> Result<Vec<i32>, String> {
    let dir = format!("/proc/{pid}/task");
    let mut tids = Vec::new();
    for entry in fs::read_dir(&dir).map_err(|e| format!("{dir}: {e}"))? {
        let entry = entry.map_err(|e| format!("{dir}: {e}"))?;
        if let Some(tid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) {
            tids.push(tid);
        }
    }
    tids.sort_unstable();
    Ok(tids)
}

/// Waits (up to `timeout`) for `tid`, seized and interrupted by this
/// thread, to report a ptrace-stop or its exit.
fn wait_for_stop(tid: i32, timeout: Duration) -> Result<Stop, String> {
    let deadline = Instant::now() + timeout;
    loop {
        let mut status = 0;
        // SAFETY: `status` is valid for writes; waitpid only reports on (and
        // reaps, for an exit) the tracee `tid`.
        let r = unsafe { libc::waitpid(tid, &mut status, libc::__WALL | libc::WNOHANG) };
        if r == tid {
            if libc::WIFSTOPPED(status) {
                let event = (status >> 16) & 0xff;
                // No event: a signal-delivery-stop, whose signal is held
                // until the tracer lets it through. PTRACE_EVENT_STOP: the
                // interrupt (or a group-stop), nothing held.
                let held = if event == 0 {
                    libc::WSTOPSIG(status)
                } else {
                    0
                };
                return Ok(Stop::Stopped(held));
            }
            if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
                return Ok(Stop::Gone);
            }
            continue;
        }
        if r < 0 {
            let e = errno();
            if e.raw_os_error() == Some(libc::ECHILD) {
                return Ok(Stop::Gone);
            }
            return Err(format!("waitpid(thread {tid}): {e}"));
        }
        if Instant::now() > deadline {
            return Err(format!(
                "thread {tid} did not reach a ptrace-stop within {timeout:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

impl Stopped {
    /// Seizes and interrupts every thread of `pid`, listing its threads
    /// again until no new one appeared, and waits for each one's stop.
    fn stop_all(&mut self) -> Result<(), String> {
        let pid = self.pid;
        for _round in 0..100 {
            let new: Vec<i32> = task_ids(pid)?
                .into_iter()
                .filter(|tid| !self.tracees.iter().any(|t| t.tid == *tid))
                .collect();
            if new.is_empty() {
                return Ok(());
            }
            for tid in new {
                // SAFETY: PTRACE_SEIZE takes no addresses (addr and data
                // are 0: no options); it only attaches to `tid`.
                let rc = unsafe {
                    libc::ptrace(
                        libc::PTRACE_SEIZE,
                        tid,
                        std::ptr::null_mut::<libc::c_void>(),
                        std::ptr::null_mut::<libc::c_void>(),
                    )
                };
                if rc != 0 {
                    let e = errno();
                    if e.raw_os_error() == Some(libc::ESRCH) {
                        continue; // exited since the listing
                    }
                    return Err(format!("PTRACE_SEIZE of thread {tid} of pid {pid}: {e}"));
                }
                self.tracees.push(Tracee {
                    tid,
                    stopped: false,
                    signal: 0,
                });
                // SAFETY: PTRACE_INTERRUPT takes no addresses; `tid` is
                // seized by this thread.
                let rc = unsafe {
                    libc::ptrace(
                        libc::PTRACE_INTERRUPT,
                        tid,
                        std::ptr::null_mut::<libc::c_void>(),
                        std::ptr::null_mut::<libc::c_void>(),
                    )
                };
                if rc != 0 {
                    let e = errno();
                    if e.raw_os_error() != Some(libc::ESRCH) {
                        return Err(format!(
                            "PTRACE_INTERRUPT of thread {tid} of pid {pid}: {e}"
                        ));
                    }
                }
            }
            let mut gone = Vec::new();
            for t in self.tracees.iter_mut().filter(|t| !t.stopped) {
                match wait_for_stop(t.tid, STOP_TIMEOUT).map_err(|e| format!("pid {pid}: {e}"))? {
                    Stop::Stopped(signal) => {
                        t.stopped = true;
                        t.signal = signal;
                    }
                    Stop::Gone => gone.push(t.tid),
                }
            }
            self.tracees.retain(|t| !gone.contains(&t.tid));
        }
        Err(format!(
            "pid {pid} kept starting threads while they were being stopped"
        ))
    }

    /// Detaches every thread (giving back the signal a stop held), each
    /// one even when another fails.
    fn detach(&mut self) -> Result<(), String> {
        let pid = self.pid;
        let mut errors = Vec::new();
        for mut t in std::mem::take(&mut self.tracees) {
            if !t.stopped {
                // Interrupted but not seen stopped: PTRACE_DETACH needs the
                // stop.
                match wait_for_stop(t.tid, Duration::from_secs(1)) {
                    Ok(Stop::Stopped(signal)) => t.signal = signal,
                    Ok(Stop::Gone) => continue,
                    Err(e) => {
                        errors.push(e);
                        continue;
                    }
                }
            }
            // SAFETY: PTRACE_DETACH reads no memory: `data` is the signal
            // number to deliver (0: none), passed as the pointer-sized
            // argument; `tid` is a stopped tracee of this thread.
            let rc = unsafe {
                libc::ptrace(
                    libc::PTRACE_DETACH,
                    t.tid,
                    std::ptr::null_mut::<libc::c_void>(),
                    t.signal as usize as *mut libc::c_void,
                )
            };
            if rc != 0 {
                let e = errno();
                let alive = Path::new(&format!("/proc/{pid}/task/{}", t.tid)).exists();
                if e.raw_os_error() != Some(libc::ESRCH) || alive {
                    errors.push(format!(
                        "PTRACE_DETACH of thread {} of pid {pid}: {e}",
                        t.tid
                    ));
                }
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = self.detach();
    }
}

/// The thread pointer of a stopped tracee: x86-64's `fs_base`.
#[cfg(target_arch = "x86_64")]
fn thread_pointer(tid: i32) -> Result<u64, String> {
    // SAFETY: user_regs_struct is integers only; all zeroes is a value.
    let mut regs: libc::user_regs_struct = unsafe { std::mem::zeroed() };
    // SAFETY: PTRACE_GETREGS writes one user_regs_struct through `data`,
    // which points at `regs`, valid for writes; `tid` is a stopped tracee
    // of this thread.
    let rc = unsafe {
        libc::ptrace(
            libc::PTRACE_GETREGS,
            tid,
            std::ptr::null_mut::<libc::c_void>(),
            (&mut regs as *mut libc::user_regs_struct).cast::<libc::c_void>(),
        )
    };
    if rc != 0 {
        return Err(format!("PTRACE_GETREGS of thread {tid}: {}", errno()));
    }
    Ok(regs.fs_base)
}

#[cfg(not(target_arch = "x86_64"))]
fn thread_pointer(tid: i32) -> Result<u64, String> {
    Err(format!(
        "thread {tid}: reading the thread pointer is implemented for x86-64 only"
    ))
}

fn read_thread(pid: i32, tid: i32, tls: &TlsSymbol) -> Result<ThreadRead, String> {
    let tp = thread_pointer(tid)?;
    if tp == 0 {
        return Err(format!("thread {tid} of pid {pid}: its fs_base is 0"));
    }
    let slot = tp.wrapping_add_signed(tls.tp_offset);
    let pointer = read_memory(pid, slot, 8)
        .map_err(|e| format!("thread {tid}: {THREAD_CTX_SYMBOL} at {slot:#x}: {e}"))?;
    let record_pointer = u64_at(&pointer, 0);
    if record_pointer == 0 {
        return Ok(ThreadRead {
            tid,
            record_pointer,
            record: None,
        });
    }
    if record_pointer % 2 != 0 {
        return Err(format!(
            "thread {tid}: record at {record_pointer:#x} is not 2-byte aligned (OTEP 4947 requires it)"
        ));
    }
    let head = read_memory(pid, record_pointer, RECORD_HEADER_LEN)
        .map_err(|e| format!("thread {tid}: record at {record_pointer:#x}: {e}"))?;
    let mut fixed = [0; RECORD_HEADER_LEN];
    fixed.copy_from_slice(&head);
    let mut record = parse_record_header(&fixed);
    if record.is_valid() && record.attrs_data_size > 0 {
        let at = record_pointer + RECORD_HEADER_LEN as u64;
        let data = read_memory(pid, at, usize::from(record.attrs_data_size)).map_err(|e| {
            format!(
                "thread {tid}: attrs-data ({} bytes at {at:#x}): {e}",
                record.attrs_data_size
            )
        })?;
        record.attrs = parse_attrs_data(&data);
    }
    Ok(ThreadRead {
        tid,
        record_pointer,
        record: Some(record),
    })
}

/// Everything read while the process is stopped.
fn read_stopped(stopped: &Stopped) -> Result<Snapshot, Fail> {
    let pid = stopped.pid;
    // Nothing in the process runs: one attempt either reads the context or
    // finds it mid-update (then the caller resumes the process and retries).
    let process = read_context(pid, 1)?;
    let tids: Vec<i32> = stopped.tracees.iter().map(|t| t.tid).collect();
    let tls_symbol = match &process {
        Some(p) if p.has_thread_local_keys() => find_tls_symbol(pid)?,
        _ => None,
    };
    let mut threads = Vec::new();
    if let Some(tls) = &tls_symbol {
        for &tid in &tids {
            threads.push(read_thread(pid, tid, tls)?);
        }
    }
    Ok(Snapshot {
        process,
        tls_symbol,
        stopped: tids,
        threads,
    })
}

/// Stops every thread of `pid` and reads what OTEP 4719 and OTEP 4947
/// publish, then lets the threads go.
///
/// Each thread is seized (`PTRACE_SEIZE`) and interrupted
/// (`PTRACE_INTERRUPT`), and its stop waited for (5 s at most), the
/// threads listed again until no new one appeared; then the process
/// context is read, and if it carries `threadlocal.*` keys,
/// `otel_thread_ctx_v1` is looked for in the `.dynsym` of
/// `/proc/PID/exe` and of the files `/proc/PID/maps` shows mapped. For
/// each thread, the variable's address is its thread pointer (x86-64:
/// `fs_base`, from `PTRACE_GETREGS`) plus [`TlsSymbol::tp_offset`], and the
/// record it points at is read (28 bytes, then `attrs-data-size` bytes when
/// it is valid). Every thread is then detached (`PTRACE_DETACH`), on errors
/// too, a signal its stop held back given back to it. A context found
/// mid-update is retried after the process ran a little (20 times).
///
/// Only the layout of x86-64 (TLS variant II) and of a symbol defined by
/// the executable itself (TLS module 1, whose block ends at the thread
/// pointer) are handled: a symbol defined by a shared library, a PT_TLS
/// whose address is not aligned to its alignment, another architecture are
/// errors. Threads are seized by the calling thread, which must make the
/// whole call (ptrace is per tracer thread); `pid` cannot be this process.
/// The schema named by `threadlocal.schema_version` is not interpreted:
/// the caller checks it.
pub fn snapshot(pid: i32) -> Result<Snapshot, String> {
    let mut attempt = 0;
    loop {
        let mut stopped = Stopped {
            pid,
            tracees: Vec::new(),
        };
        let read = stopped
            .stop_all()
            .map_err(Fail::Hard)
            .and_then(|()| read_stopped(&stopped));
        let detached = stopped.detach();
        match (read, detached) {
            (Ok(snapshot), Ok(())) => return Ok(snapshot),
            (Err(Fail::Busy(_)), Ok(())) if attempt < 20 => {
                attempt += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
            (Err(e), Ok(())) => return Err(e.message()),
            (Ok(_), Err(d)) => return Err(d),
            (Err(e), Err(d)) => return Err(format!("{}; then {d}", e.message())),
        }
    }
}

#[cfg(test)]
mod properties;

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    use std::sync::mpsc;

    // -- A minimal protobuf encoder, for hand-built payloads ---------------

    fn varint(mut v: u64, out: &mut Vec<u8>) {
        loop {
            let byte = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }

    fn tag(field: u64, wire: u8, out: &mut Vec<u8>) {
        varint(field << 3 | u64::from(wire), out);
    }

    fn bytes_field(field: u64, bytes: &[u8], out: &mut Vec<u8>) {
        tag(field, WIRE_LEN, out);
        varint(bytes.len() as u64, out);
        out.extend_from_slice(bytes);
    }

    fn any_str(s: &str) -> Vec<u8> {
        let mut v = Vec::new();
        bytes_field(1, s.as_bytes(), &mut v);
        v
    }

    fn any_int(i: i64) -> Vec<u8> {
        let mut v = Vec::new();
        tag(3, WIRE_VARINT, &mut v);
        varint(i as u64, &mut v);
        v
    }

    fn any_bool(b: bool) -> Vec<u8> {
        let mut v = Vec::new();
        tag(2, WIRE_VARINT, &mut v);
        varint(u64::from(b), &mut v);
        v
    }

    fn any_double(d: f64) -> Vec<u8> {
        let mut v = Vec::new();
        tag(4, WIRE_FIXED64, &mut v);
        v.extend_from_slice(&d.to_bits().to_le_bytes());
        v
    }

    fn any_array(values: &[Vec<u8>]) -> Vec<u8> {
        let mut array = Vec::new();
        for value in values {
            bytes_field(1, value, &mut array);
        }
        let mut v = Vec::new();
        bytes_field(5, &array, &mut v);
        v
    }

    fn key_value(key: &str, any: &[u8]) -> Vec<u8> {
        let mut kv = Vec::new();
        bytes_field(1, key.as_bytes(), &mut kv);
        bytes_field(2, any, &mut kv);
        kv
    }

    /// `ProcessContext{resource{attributes}, attributes}`.
    fn process_context(resource: &[Vec<u8>], attributes: &[Vec<u8>]) -> Vec<u8> {
        let mut res = Vec::new();
        for kv in resource {
            bytes_field(1, kv, &mut res);
        }
        let mut pc = Vec::new();
        bytes_field(1, &res, &mut pc);
        for kv in attributes {
            bytes_field(2, kv, &mut pc);
        }
        pc
    }

    fn thread_local_attributes(keys: &[&str]) -> Vec<Vec<u8>> {
        let names: Vec<Vec<u8>> = keys.iter().map(|k| any_str(k)).collect();
        vec![
            key_value(SCHEMA_VERSION_KEY, &any_str("tlsdesc_v1_dev")),
            key_value(KEY_MAP_KEY, &any_array(&names)),
        ]
    }

    #[test]
    fn decodes_a_hand_built_process_context() {
        // Resource: fields the reader does not know around the attributes
        // (2: dropped_attributes_count, 3: entity refs, 9: a fixed32).
        let mut resource = Vec::new();
        bytes_field(
            1,
            &key_value("service.name", &any_str("svc")),
            &mut resource,
        );
        tag(2, WIRE_VARINT, &mut resource);
        varint(7, &mut resource);
        bytes_field(3, b"an entity ref", &mut resource);
        tag(9, WIRE_FIXED32, &mut resource);
        resource.extend_from_slice(&[1, 2, 3, 4]);
        bytes_field(1, &key_value("neg", &any_int(-5)), &mut resource);
        bytes_field(1, &key_value("on", &any_bool(true)), &mut resource);
        bytes_field(1, &key_value("ratio", &any_double(1.5)), &mut resource);
        let nested = any_array(&[
            any_str("a"),
            any_int(2),
            any_array(&[any_bool(false), any_str("deep")]),
        ]);
        bytes_field(1, &key_value("list", &nested), &mut resource);
        // A kvlist_value (6) and a bytes_value (7): Other.
        let mut kvlist = Vec::new();
        bytes_field(6, &key_value("x", &any_str("y")), &mut kvlist);
        bytes_field(1, &key_value("map", &kvlist), &mut resource);
        let mut raw = Vec::new();
        bytes_field(7, &[0xff, 0], &mut raw);
        bytes_field(1, &key_value("raw", &raw), &mut resource);
        // A KeyValue with an unknown fixed64 field, an AnyValue with an
        // unknown field of a newer oneof member.
        let mut kv = key_value("odd", &{
            let mut any = any_str("kept");
            tag(15, WIRE_FIXED64, &mut any);
            any.extend_from_slice(&[0; 8]);
            any
        });
        tag(7, WIRE_FIXED64, &mut kv);
        kv.extend_from_slice(&[9; 8]);
        bytes_field(1, &kv, &mut resource);
        let mut newer = Vec::new();
        bytes_field(8, b"?", &mut newer);
        bytes_field(1, &key_value("newer", &newer), &mut resource);

        let mut payload = Vec::new();
        tag(9, WIRE_VARINT, &mut payload);
        varint(300, &mut payload);
        bytes_field(1, &resource, &mut payload);
        for kv in thread_local_attributes(&["http.route", "http.method"]) {
            bytes_field(2, &kv, &mut payload);
        }
        bytes_field(10, b"unknown trailing field", &mut payload);

        let (resource, attributes) = decode_process_context(&payload).unwrap();
        let context = ProcessContextRead {
            mapping_name: String::new(),
            mapping_start: 0,
            version: 2,
            published_at_ns: 1,
            resource: resource.clone(),
            attributes,
        };
        assert_eq!(
            resource,
            vec![
                ("service.name".into(), Value::Str("svc".into())),
                ("neg".into(), Value::Int(-5)),
                ("on".into(), Value::Bool(true)),
                ("ratio".into(), Value::Double(1.5)),
                (
                    "list".into(),
                    Value::Array(vec![
                        Value::Str("a".into()),
                        Value::Int(2),
                        Value::Array(vec![Value::Bool(false), Value::Str("deep".into())]),
                    ])
                ),
                ("map".into(), Value::Other),
                ("raw".into(), Value::Other),
                ("odd".into(), Value::Str("kept".into())),
                ("newer".into(), Value::Other),
            ]
        );
        assert_eq!(context.resource_str("service.name"), Some("svc"));
        assert_eq!(context.resource_str("neg"), None);
        assert_eq!(context.schema_version(), Some("tlsdesc_v1_dev"));
        assert_eq!(context.key_map(), vec!["http.route", "http.method"]);
        assert!(context.has_thread_local_keys());
    }

    #[test]
    fn an_empty_payload_is_an_empty_context() {
        assert_eq!(decode_process_context(&[]), Ok((vec![], vec![])));
    }

    #[test]
    fn truncated_or_malformed_payloads_are_errors() {
        let payload = process_context(
            &[key_value("service.name", &any_str("svc"))],
            &thread_local_attributes(&["a", "b"]),
        );
        assert!(decode_process_context(&payload).is_ok());
        // Every cut inside the outer message's fields is an error, never a
        // panic (only the cuts at field boundaries decode).
        let mut boundaries = vec![0];
        let mut pb = Pb::new(&payload, "test");
        while pb.more() {
            let (_, wire) = pb.tag().unwrap();
            pb.skip(wire).unwrap();
            boundaries.push(pb.pos);
        }
        for cut in 0..payload.len() {
            let result = decode_process_context(&payload[..cut]);
            assert_eq!(
                result.is_ok(),
                boundaries.contains(&cut),
                "cut at {cut}: {result:?}"
            );
        }
        // A varint that never ends, one over 64 bits.
        assert!(decode_process_context(&[0x48, 0x80, 0x80]).is_err());
        assert!(decode_process_context(&[
            0x48, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f
        ])
        .is_err());
        // A length past the end.
        let err = decode_process_context(&[0x0a, 0x05, 0x0a]).unwrap_err();
        assert!(err.contains("5 bytes wanted, 1 left"), "{err}");
        // Resource as a varint (wrong wire type), a group, field 0.
        assert!(decode_process_context(&[0x08, 0x01]).is_err());
        assert!(decode_process_context(&[0x1b]).is_err());
        assert!(decode_process_context(&[0x02, 0x00]).is_err());
        // A key that is not UTF-8.
        let mut bad = Vec::new();
        bytes_field(2, &key_value("\u{e9}", &any_str("v")), &mut bad);
        let at = bad.iter().position(|&b| b == 0xc3).unwrap();
        bad[at] = 0xff;
        let err = decode_process_context(&bad).unwrap_err();
        assert!(err.contains("not UTF-8"), "{err}");
        // Arrays nested too deep.
        let mut deep = any_str("x");
        for _ in 0..40 {
            deep = any_array(&[deep]);
        }
        let err =
            decode_process_context(&process_context(&[key_value("d", &deep)], &[])).unwrap_err();
        assert!(err.contains("nested"), "{err}");
    }

    #[test]
    fn attrs_data_follows_the_spec() {
        let key_map: Vec<String> = ["http.route", "http.method", "user"]
            .map(String::from)
            .to_vec();
        let data = [
            0, 4, b'/', b'a', b'p', b'i', // route = "/api"
            1, 3, b'G', b'E', b'T', // method = "GET"
            7, 2, b'n', b'o', // key 7: outside the map, ignored
            0, 2, b'/', b'b', // route again: the last one wins
            2, 0, // user = ""
            1, 5, b'P', b'O', // incomplete: parsing stops here
        ];
        let entries = parse_attrs_data(&data);
        assert_eq!(
            entries,
            vec![
                (0, b"/api".to_vec()),
                (1, b"GET".to_vec()),
                (7, b"no".to_vec()),
                (0, b"/b".to_vec()),
                (2, Vec::new()),
            ]
        );
        let record = ThreadRecordRead {
            trace_id: [1; 16],
            span_id: [2; 8],
            valid: 1,
            trace_flags: 1,
            attrs_data_size: data.len() as u16,
            attrs: entries,
        };
        assert_eq!(
            record.attributes(&key_map),
            vec![
                ("http.route".into(), "/b".into()),
                ("http.method".into(), "GET".into()),
                ("user".into(), String::new()),
            ]
        );
        // A lone trailing key byte, and nothing at all.
        assert_eq!(parse_attrs_data(&[0, 1, b'x', 1]), vec![(0, b"x".to_vec())]);
        assert_eq!(parse_attrs_data(&[]), vec![]);
        // With an empty key map every entry is unknown.
        assert_eq!(record.attributes(&[]), vec![]);
    }

    #[test]
    fn record_header_layout() {
        let mut bytes = [0u8; RECORD_HEADER_LEN];
        for (i, b) in bytes[..24].iter_mut().enumerate() {
            *b = i as u8;
        }
        bytes[24] = 1;
        bytes[25] = 0x03;
        bytes[26..].copy_from_slice(&300u16.to_ne_bytes());
        let r = parse_record_header(&bytes);
        assert_eq!(r.trace_id, core::array::from_fn(|i| i as u8));
        assert_eq!(r.span_id, core::array::from_fn(|i| 16 + i as u8));
        assert!(r.is_valid());
        assert_eq!((r.trace_flags, r.attrs_data_size), (3, 300));
        bytes[24] = 2;
        assert!(!parse_record_header(&bytes).is_valid());
    }

    #[test]
    fn maps_lines_and_context_names() {
        let lines = [
            "7f1c2a000000-7f1c2a001000 rw-s 00000000 00:01 2071     /memfd:OTEL_CTX (deleted)",
            "7f1c2a001000-7f1c2a002000 rw-p 00000000 00:00 0        [anon:OTEL_CTX]",
            "7f1c2a002000-7f1c2a003000 rw-p 00000000 00:01 2072     [anon_shmem:OTEL_CTX]",
        ];
        let names: Vec<String> = lines
            .iter()
            .map(|l| parse_maps_line(l).unwrap().pathname)
            .collect();
        assert_eq!(
            names,
            [
                "/memfd:OTEL_CTX (deleted)",
                "[anon:OTEL_CTX]",
                "[anon_shmem:OTEL_CTX]"
            ]
        );
        assert!(names.iter().all(|n| is_context_mapping_name(n)));
        let first = parse_maps_line(lines[0]).unwrap();
        assert_eq!(
            first,
            MapsEntry {
                start: 0x7f1c_2a00_0000,
                end: 0x7f1c_2a00_1000,
                pathname: "/memfd:OTEL_CTX (deleted)".into(),
            }
        );
        let lib = parse_maps_line(
            "7f1c29e00000-7f1c29e28000 r--p 00000000 08:01 1234567                    /usr/lib/x86_64-linux-gnu/libc.so.6",
        )
        .unwrap();
        assert_eq!(lib.pathname, "/usr/lib/x86_64-linux-gnu/libc.so.6");
        let anon = parse_maps_line("7ffd1000-7ffd2000 rw-p 00001000 00:00 0 ").unwrap();
        assert_eq!(
            (anon.start, anon.end, anon.pathname.as_str()),
            (0x7ffd1000, 0x7ffd2000, "")
        );
        for other in [
            "[anon:OTHER]",
            "[heap]",
            "/memfd:other (deleted)",
            "",
            "OTEL_CTX",
        ] {
            assert!(!is_context_mapping_name(other), "{other}");
        }
        assert!(parse_maps_line("not a maps line").is_none());
    }

    fn self_mapped(file_name_part: &str) -> String {
        let maps = fs::read_to_string("/proc/self/maps").unwrap();
        maps.lines()
            .filter_map(parse_maps_line)
            .map(|e| e.pathname)
            .find(|p| p.starts_with('/') && p.contains(file_name_part))
            .unwrap_or_else(|| panic!("{file_name_part} in /proc/self/maps:\n{maps}"))
    }

    #[test]
    fn finds_dynamic_symbols_in_a_real_elf_file() {
        let libc_path = self_mapped("libc.so");
        let libc = Elf::open(Path::new(&libc_path), &libc_path)
            .unwrap()
            .unwrap();
        let symbols = libc.symbols(SHT_DYNSYM).unwrap();
        let malloc = symbols
            .iter()
            .find(|s| s.name == "malloc" && s.defined())
            .expect("malloc in libc's .dynsym");
        assert_eq!(malloc.kind, 2, "STT_FUNC: {malloc:?}");
        assert_ne!(malloc.value, 0);
        // glibc exports errno, a TLS variable: the kind of symbol
        // otel_thread_ctx_v1 is.
        let errno = symbols
            .iter()
            .find(|s| s.name == "errno" && s.defined())
            .expect("errno in libc's .dynsym");
        assert_eq!((errno.kind, errno.size), (STT_TLS, 4), "{errno:?}");
        let tls = libc.tls_segment().unwrap().expect("libc has PT_TLS");
        assert!(errno.value + errno.size <= tls.memsz, "{errno:?} {tls:?}");
        assert!(!symbols.iter().any(|s| s.name == THREAD_CTX_SYMBOL));
        // Not ELF: None, not an error.
        assert!(Elf::open(Path::new("/proc/self/maps"), "maps")
            .unwrap()
            .is_none());
        assert!(Elf::open(Path::new("/nonexistent"), "nowhere")
            .err()
            .unwrap()
            .contains("nowhere"));
    }

    #[test]
    fn variant_ii_arithmetic() {
        let tls = TlsSegment {
            vaddr: 0x1000,
            memsz: 0x90,
            align: 0x40,
        };
        // The block is round_up(0x90, 0x40) = 0xc0 below the pointer.
        assert_eq!(variant_ii_offset(0x88, 8, &tls), Ok(0x88 - 0xc0));
        assert!(variant_ii_offset(0x90, 8, &tls).is_err());
        let unaligned = TlsSegment {
            vaddr: 0x1008,
            ..tls
        };
        assert!(variant_ii_offset(0, 8, &unaligned)
            .unwrap_err()
            .contains("p_vaddr"));
    }

    #[test]
    fn no_context_in_this_process_and_errors_name_the_file() {
        assert_eq!(read_process_context(std::process::id() as i32), Ok(None));
        let err = read_process_context(i32::MAX).unwrap_err();
        assert!(err.contains(&format!("/proc/{}/maps", i32::MAX)), "{err}");
        let err = snapshot(i32::MAX).unwrap_err();
        assert!(err.contains(&format!("/proc/{}/task", i32::MAX)), "{err}");
    }

    // -- Child processes ----------------------------------------------------

    /// Kills and reaps a child on drop.
    struct Reaped(i32);

    impl Reaped {
        /// Kills the child and returns how `waitpid` saw it end.
        fn kill(&mut self) -> i32 {
            let pid = std::mem::replace(&mut self.0, 0);
            if pid == 0 {
                return 0;
            }
            // SAFETY: kill and waitpid on our own child; `status` is
            // valid for writes.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                let mut status = 0;
                libc::waitpid(pid, &mut status, 0);
                status
            }
        }
    }

    impl Drop for Reaped {
        fn drop(&mut self) {
            self.kill();
        }
    }

    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    enum Publish {
        /// memfd_create, mmap of it, prctl naming.
        MemfdNamed,
        /// An anonymous mapping, prctl naming.
        AnonNamed,
        /// memfd_create, mmap of it, no naming.
        MemfdUnnamed,
    }

    fn boottime_ns() -> u64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is valid for writes; clock_gettime is
        // async-signal-safe (this runs in forked children).
        unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }

    /// In a forked child, only async-signal-safe calls: the mapping of
    /// OTEP 4719's Publication Protocol (header first, payload after it,
    /// fence, timestamp last, name). Returns the header's address or exits.
    ///
    /// # Safety
    /// Only in a forked child, which then never returns to the test.
    unsafe fn publish_by_hand(how: Publish, len: usize, payload: &[u8]) -> *mut u8 {
        let name = c"OTEL_CTX";
        let mut fd = -1;
        if how != Publish::AnonNamed {
            // SAFETY: `name` is NUL-terminated; the flags are the spec's.
            fd = unsafe {
                libc::memfd_create(
                    name.as_ptr(),
                    libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING | libc::MFD_NOEXEC_SEAL,
                )
            };
            if fd < 0 {
                // SAFETY: as above, without the newer flag.
                fd = unsafe {
                    libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
                };
            }
            // SAFETY: `fd` is ours (or -1, then not used).
            if fd < 0 || unsafe { libc::ftruncate(fd, len as libc::off_t) } != 0 {
                // SAFETY: ends the child at once, as nothing else may.
                unsafe { libc::_exit(10) };
            }
        }
        let flags = if fd < 0 {
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS
        } else {
            libc::MAP_PRIVATE
        };
        // SAFETY: a new mapping of `len` bytes, placed by the kernel.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            // SAFETY: ends the child.
            unsafe { libc::_exit(11) };
        }
        // SAFETY: `fd` is ours; `map` is the new `len`-byte mapping, and
        // the header (32 bytes) and payload fit in it (the caller sizes
        // it); the header fields are aligned (the mapping is page-aligned).
        unsafe {
            if fd >= 0 {
                libc::close(fd);
            }
            libc::madvise(map, len, libc::MADV_DONTFORK);
            let base = map.cast::<u8>();
            let payload_at = base.add(HEADER_LEN);
            std::ptr::copy_nonoverlapping(payload.as_ptr(), payload_at, payload.len());
            std::ptr::copy_nonoverlapping(SIGNATURE.as_ptr(), base, 8);
            std::ptr::write_volatile(base.add(OFF_VERSION).cast::<u32>(), SUPPORTED_VERSION);
            std::ptr::write_volatile(
                base.add(OFF_PAYLOAD_SIZE).cast::<u32>(),
                payload.len() as u32,
            );
            std::ptr::write_volatile(base.add(OFF_PAYLOAD).cast::<u64>(), payload_at as u64);
            fence(Ordering::SeqCst);
            std::ptr::write_volatile(base.add(OFF_PUBLISHED).cast::<u64>(), boottime_ns());
            if how != Publish::MemfdUnnamed {
                libc::prctl(
                    libc::PR_SET_VMA,
                    libc::PR_SET_VMA_ANON_NAME as libc::c_ulong,
                    map as libc::c_ulong,
                    len as libc::c_ulong,
                    name.as_ptr() as libc::c_ulong,
                );
            }
            base
        }
    }

    /// Forks a child that publishes `payloads[0]` and, with more than one,
    /// keeps replacing the payload in place by the Updating Protocol,
    /// cycling through them: 50 us mid-update with half the new payload
    /// written, 50 us between updates.
    fn fork_publisher(how: Publish, payloads: &[Vec<u8>]) -> Reaped {
        let len = 2 * 4096;
        let largest = payloads.iter().map(Vec::len).max().unwrap();
        assert!(HEADER_LEN + largest <= len);
        // SAFETY: the child makes only async-signal-safe calls (no
        // allocation, no locks) on memory it inherited, and never returns:
        // it pauses or loops until killed.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", errno());
        if pid > 0 {
            return Reaped(pid);
        }
        // SAFETY: in the forked child, as publish_by_hand requires.
        unsafe {
            let base = publish_by_hand(how, len, &payloads[0]);
            if payloads.len() == 1 {
                loop {
                    libc::pause();
                }
            }
            let mut last = std::ptr::read_volatile(base.add(OFF_PUBLISHED).cast::<u64>());
            let pause = libc::timespec {
                tv_sec: 0,
                tv_nsec: 50_000,
            };
            for next in (0..payloads.len()).cycle().skip(1) {
                let payload = &payloads[next];
                std::ptr::write_volatile(base.add(OFF_PUBLISHED).cast::<u64>(), 0);
                fence(Ordering::SeqCst);
                // Half the payload, a pause, the other half: as long
                // mid-update (and torn) as between updates.
                let half = payload.len() / 2;
                std::ptr::copy_nonoverlapping(payload.as_ptr(), base.add(HEADER_LEN), half);
                libc::nanosleep(&pause, std::ptr::null_mut());
                std::ptr::copy_nonoverlapping(
                    payload.as_ptr().add(half),
                    base.add(HEADER_LEN + half),
                    payload.len() - half,
                );
                std::ptr::write_volatile(
                    base.add(OFF_PAYLOAD_SIZE).cast::<u32>(),
                    payload.len() as u32,
                );
                fence(Ordering::SeqCst);
                last = boottime_ns().max(last + 1);
                std::ptr::write_volatile(base.add(OFF_PUBLISHED).cast::<u64>(), last);
                libc::nanosleep(&pause, std::ptr::null_mut());
            }
            libc::_exit(0)
        }
    }

    fn wait_for_context(pid: i32) -> ProcessContextRead {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match read_process_context(pid) {
                Ok(Some(context)) => return context,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(2))
                }
                other => panic!("pid {pid}'s process context: {other:?}"),
            }
        }
    }

    /// Whether `prctl(PR_SET_VMA_ANON_NAME)` works here (Linux 5.17+ with
    /// `CONFIG_ANON_VMA_NAME`).
    fn kernel_names_anonymous_mappings() -> bool {
        // SAFETY: a new anonymous page, named, then unmapped; nothing else
        // refers to it.
        unsafe {
            let map = libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(map, libc::MAP_FAILED, "mmap: {}", errno());
            let rc = libc::prctl(
                libc::PR_SET_VMA,
                libc::PR_SET_VMA_ANON_NAME as libc::c_ulong,
                map as libc::c_ulong,
                4096 as libc::c_ulong,
                c"probe".as_ptr() as libc::c_ulong,
            );
            libc::munmap(map, 4096);
            rc == 0
        }
    }

    #[test]
    fn reads_a_context_published_by_hand() {
        let payload = process_context(
            &[
                key_value("service.name", &any_str("by-hand")),
                key_value("service.instance.id", &any_str("0123")),
            ],
            &thread_local_attributes(&["http.route"]),
        );
        let mut ways = vec![Publish::MemfdNamed, Publish::MemfdUnnamed];
        if kernel_names_anonymous_mappings() {
            ways.push(Publish::AnonNamed);
        } else {
            // Then an unnamed anonymous mapping is all the fallback gets,
            // which the spec says is no context.
            eprintln!("no CONFIG_ANON_VMA_NAME: [anon:OTEL_CTX] not exercised");
        }
        for how in ways {
            let before = boottime_ns();
            let mut child = fork_publisher(how, std::slice::from_ref(&payload));
            let context = wait_for_context(child.0);
            eprintln!("{how:?}: {}", context.mapping_name);
            let expected_name = match how {
                // Where the kernel cannot name a memfd mapping, it keeps
                // its file name.
                Publish::MemfdNamed => ["[anon_shmem:OTEL_CTX]", "/memfd:OTEL_CTX (deleted)"]
                    .contains(&context.mapping_name.as_str()),
                Publish::AnonNamed => context.mapping_name == "[anon:OTEL_CTX]",
                Publish::MemfdUnnamed => context.mapping_name == "/memfd:OTEL_CTX (deleted)",
            };
            assert!(expected_name, "{how:?}: {context:?}");
            assert_eq!(context.version, 2);
            assert!(context.published_at_ns >= before, "{context:?}");
            assert_eq!(context.resource_str("service.name"), Some("by-hand"));
            assert_eq!(context.resource_str("service.instance.id"), Some("0123"));
            assert_eq!(context.schema_version(), Some("tlsdesc_v1_dev"));
            assert_eq!(context.key_map(), vec!["http.route"]);

            // Stopped, the child still shows it; its executable (this test
            // binary) does not define otel_thread_ctx_v1.
            let snap = snapshot(child.0).unwrap();
            assert_eq!(snap.process.as_ref(), Some(&context));
            assert_eq!(snap.stopped, vec![child.0]);
            assert_eq!((snap.tls_symbol, snap.threads), (None, vec![]));
            let status = child.kill();
            assert!(libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL);
        }
    }

    #[test]
    fn reads_stay_consistent_while_the_writer_updates() {
        let a = process_context(
            &[key_value("service.name", &any_str("aaaaaaaaaaaaaaaa"))],
            &[key_value("n", &any_int(1))],
        );
        let b = process_context(
            &[
                key_value("service.name", &any_str("bb")),
                key_value("extra", &any_array(&[any_str("x"), any_double(2.5)])),
            ],
            &[key_value("n", &any_int(-2))],
        );
        let decoded = [
            decode_process_context(&a).unwrap(),
            decode_process_context(&b).unwrap(),
        ];
        let _child = fork_publisher(Publish::MemfdNamed, &[a, b]);
        let pid = _child.0;
        wait_for_context(pid);
        let (mut seen, mut stamps) = ([0; 2], Vec::new());
        for _ in 0..2000 {
            let c = read_process_context(pid).unwrap().unwrap();
            let which = decoded
                .iter()
                .position(|d| *d == (c.resource.clone(), c.attributes.clone()))
                .unwrap_or_else(|| panic!("a torn read: {c:?}"));
            seen[which] += 1;
            stamps.push(c.published_at_ns);
        }
        stamps.dedup();
        eprintln!("payloads seen {seen:?}, {} timestamps", stamps.len());
        assert!(stamps.len() > 1, "the writer updated during the reads");
        // Stopped mid-update, a snapshot lets it run and tries again.
        for _ in 0..50 {
            let snap = snapshot(pid).unwrap();
            let c = snap.process.expect("a process context");
            assert!(
                decoded.contains(&(c.resource.clone(), c.attributes.clone())),
                "a torn read: {c:?}"
            );
            assert_eq!(snap.stopped, vec![pid]);
        }
    }

    // -- Re-executed test binary with threads ---------------------------

    const CHILD_ENV: &str = "OTEP_READER_CHILD";

    std::thread_local! {
        /// The child's stand-in for `otel_thread_ctx_v1`: a thread-local of
        /// the executable (so in TLS module 1), found through `.symtab`.
        static OTEP_READER_PROBE: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }

    /// What a child thread publishes.
    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    enum Published {
        /// A valid record with attributes.
        Valid,
        /// A record whose `valid` is 0 (its attrs-data is not read).
        Invalid,
        /// A NULL pointer.
        Null,
    }

    /// A Thread-Local Context Record built by hand from OTEP 4947's
    /// table: ids from `tid`, attrs-data with a key repeated (last wins),
    /// a key outside a one-key map, and an incomplete trailing entry.
    fn hand_built_record(tid: i32, valid: u8) -> Vec<u8> {
        let mut record = Vec::new();
        let mut trace_id = [0x11u8; 16];
        trace_id[..4].copy_from_slice(&tid.to_le_bytes());
        record.extend_from_slice(&trace_id);
        record.extend_from_slice(&[0x22; 8]);
        record.push(valid);
        record.push(0x01);
        let attrs: &[u8] = &[
            0, 3, b'/', b'a', b'b', // key 0
            9, 1, b'x', // key 9: not in the map
            0, 5, b'/', b'l', b'a', b's', b't', // key 0 again
            1, 7, b'G', // incomplete
        ];
        record.extend_from_slice(&(attrs.len() as u16).to_ne_bytes());
        record.extend_from_slice(attrs);
        record
    }

    /// Publishes `what` in this thread's OTEP_READER_PROBE and prints
    /// `probe TID ADDRESS-OF-PROBE RECORD-POINTER`.
    fn set_probe(what: Published) {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        let pointer = match what {
            Published::Null => 0,
            Published::Valid | Published::Invalid => {
                let valid = u8::from(what == Published::Valid);
                // Leaked: the record lives as long as the child.
                let record: &'static mut [u8] =
                    Box::leak(hand_built_record(tid, valid).into_boxed_slice());
                record.as_ptr() as u64
            }
        };
        OTEP_READER_PROBE.with(|p| {
            p.set(pointer);
            println!("probe {tid} {:#x} {pointer:#x}", p.as_ptr() as u64);
        });
    }

    /// Not a test of its own: the body of the child the ptrace tests
    /// start (this binary again, with `OTEP_READER_CHILD` set). Two more
    /// threads, a record published on each of three threads, a tick every
    /// 20 ms.
    #[test]
    fn child_process_body() {
        if std::env::var_os(CHILD_ENV).is_none() {
            return;
        }
        let (set, done) = mpsc::channel();
        for what in [Published::Valid, Published::Null] {
            let set = set.clone();
            std::thread::spawn(move || {
                set_probe(what);
                set.send(()).unwrap();
                loop {
                    std::thread::sleep(Duration::from_millis(10));
                }
            });
        }
        set_probe(Published::Invalid);
        done.recv().unwrap();
        done.recv().unwrap();
        println!("ready");
        for tick in 0..1500 {
            println!("tick {tick}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    struct ThreadedChild {
        child: std::process::Child,
        pid: i32,
        lines: mpsc::Receiver<String>,
        /// (tid, address of OTEP_READER_PROBE, the pointer stored there)
        /// of the threads that set it.
        probes: Vec<(i32, u64, u64)>,
    }

    fn spawn_threaded_child() -> ThreadedChild {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "otep_reader::tests::child_process_body",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let pid = child.id() as i32;
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if send.send(line).is_err() {
                    return;
                }
            }
        });
        let mut probes = Vec::new();
        loop {
            let line = lines
                .recv_timeout(Duration::from_secs(30))
                .expect("the child says it is ready");
            if line == "ready" {
                break;
            }
            // The main test thread's line follows libtest's `test name ...`.
            if let Some((_, rest)) = line.split_once("probe ") {
                let fields: Vec<&str> = rest.split(' ').collect();
                let hex = |f: &str| u64::from_str_radix(f.trim_start_matches("0x"), 16).unwrap();
                probes.push((fields[0].parse().unwrap(), hex(fields[1]), hex(fields[2])));
            }
        }
        ThreadedChild {
            child,
            pid,
            lines,
            probes,
        }
    }

    impl ThreadedChild {
        /// Kills the child; the signal that ended it, as `wait` saw it.
        fn kill(&mut self) -> Option<i32> {
            use std::os::unix::process::ExitStatusExt as _;
            self.child.kill().unwrap();
            self.child.wait().unwrap().signal()
        }
    }

    impl Drop for ThreadedChild {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    fn status_field(pid: i32, tid: i32, field: &str) -> String {
        let status = fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .unwrap_or_else(|| panic!("{field} in {status}"))
            .trim()
            .to_owned()
    }

    #[test]
    fn snapshot_stops_and_detaches_a_threaded_process() {
        let mut c = spawn_threaded_child();
        let pid = c.pid;
        let snap = snapshot(pid).unwrap();
        assert_eq!(snap.process, None);
        assert_eq!(snap.tls_symbol, None);
        assert_eq!(snap.threads, vec![]);
        let tasks = task_ids(pid).unwrap();
        assert!(tasks.len() >= 3, "{tasks:?}");
        assert_eq!(snap.stopped, tasks, "every thread was stopped");
        for tid in &tasks {
            assert_eq!(status_field(pid, *tid, "TracerPid:"), "0", "thread {tid}");
            let state = status_field(pid, *tid, "State:");
            assert!(!state.starts_with('t'), "thread {tid}: {state}");
        }
        // It keeps running: a tick printed after the detach.
        while c.lines.try_recv().is_ok() {}
        let tick = c.lines.recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(tick.starts_with("tick "), "{tick}");
        assert_eq!(c.kill(), Some(libc::SIGKILL));
    }

    /// The thread-pointer arithmetic and the record reads on a real
    /// executable: the test binary's own thread-local (in its `.symtab`,
    /// of the executable's TLS module, as `otel_thread_ctx_v1` would be)
    /// holding records built by hand, read from a stopped child through
    /// fs_base and PT_TLS.
    #[test]
    fn reads_hand_built_records_through_a_real_thread_local() {
        let exe = std::env::current_exe().unwrap();
        let label = exe.display().to_string();
        let elf = Elf::open(&exe, &label).unwrap().unwrap();
        let probe: Vec<ElfSymbol> = elf
            .symbols(SHT_SYMTAB)
            .unwrap()
            .into_iter()
            .filter(|s| s.kind == STT_TLS && s.name.contains("OTEP_READER_PROBE"))
            .collect();
        assert_eq!(probe.len(), 1, "{probe:?}");
        let segment = elf.tls_segment().unwrap().unwrap();
        let tls = TlsSymbol {
            module: label,
            st_value: probe[0].value,
            st_size: probe[0].size,
            tls_memsz: segment.memsz,
            tls_align: segment.align,
            tp_offset: variant_ii_offset(probe[0].value, probe[0].size, &segment).unwrap(),
        };

        let c = spawn_threaded_child();
        let pid = c.pid;
        assert_eq!(c.probes.len(), 3, "{:?}", c.probes);
        let mut stopped = Stopped {
            pid,
            tracees: Vec::new(),
        };
        stopped.stop_all().unwrap();
        let mut slots = Vec::new();
        let mut reads = Vec::new();
        for t in &stopped.tracees {
            let tp = thread_pointer(t.tid).unwrap();
            slots.push((t.tid, tp.wrapping_add_signed(tls.tp_offset)));
            reads.push(read_thread(pid, t.tid, &tls));
        }
        stopped.detach().unwrap();
        let reads: Vec<ThreadRead> = reads.into_iter().map(Result::unwrap).collect();

        let key_map = vec!["http.route".to_owned()];
        let mut kinds = Vec::new();
        for &(tid, addr, pointer) in &c.probes {
            let slot = slots.iter().find(|s| s.0 == tid).unwrap().1;
            assert_eq!(slot, addr, "thread {tid}'s variable");
            let read = reads.iter().find(|r| r.tid == tid).unwrap();
            assert_eq!(read.record_pointer, pointer, "thread {tid}");
            let Some(record) = &read.record else {
                assert_eq!(pointer, 0);
                kinds.push(Published::Null);
                continue;
            };
            let mut trace_id = [0x11u8; 16];
            trace_id[..4].copy_from_slice(&tid.to_le_bytes());
            assert_eq!((record.trace_id, record.span_id), (trace_id, [0x22; 8]));
            assert_eq!((record.trace_flags, record.attrs_data_size), (1, 18));
            if record.is_valid() {
                kinds.push(Published::Valid);
                assert_eq!(
                    record.attrs,
                    vec![
                        (0, b"/ab".to_vec()),
                        (9, b"x".to_vec()),
                        (0, b"/last".to_vec())
                    ]
                );
                assert_eq!(
                    record.attributes(&key_map),
                    vec![("http.route".to_owned(), "/last".to_owned())]
                );
            } else {
                kinds.push(Published::Invalid);
                assert_eq!(record.valid, 0);
                assert_eq!(
                    record.attrs,
                    vec![],
                    "an invalid record's attrs are not read"
                );
            }
        }
        kinds.sort_by_key(|k| *k as u8);
        assert_eq!(
            kinds,
            [Published::Valid, Published::Invalid, Published::Null]
        );
        // A thread that never set it (libtest's own, if any): NULL.
        for read in &reads {
            if !c.probes.iter().any(|p| p.0 == read.tid) {
                assert_eq!((read.record_pointer, &read.record), (0, &None));
            }
        }
    }
}
