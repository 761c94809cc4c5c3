// SPDX-License-Identifier: Apache-2.0 OR MIT
//! [`ContextPublisher`]: the span processor through which the service's
//! resource reaches the process context, and chosen attributes of its
//! spans reach the thread records.
//!
//! The SDK gives its resource to the processors and exporters it is built
//! with (`SpanProcessor::set_resource`) and to nothing else, and a span's
//! attributes to its processors; a processor is therefore the one place
//! that sees both. At `on_start`, the values of the chosen keys (the span's
//! own, over those of the context it starts in, so a database span under a
//! request keeps the request's `http.route`) are encoded once as OTEP
//! 4947's `attrs-data` and kept by span id until `on_end`; the context
//! observer copies them into the record when it prepares a context with
//! that span, so a context switch still copies a prepared record and looks
//! nothing up. Attributes set after the span started (`set_attribute`) are
//! not seen: the semantic conventions ask for `http.route` and its kind at
//! creation, where samplers see them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::Duration;

use opentelemetry::trace::TraceContextExt as _;
use opentelemetry::{Context, Key, KeyValue};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanProcessor};
use opentelemetry_sdk::Resource;

use super::process;

/// Bytes of attributes a record holds after its 28-byte header: the
/// record and its attributes take 124 bytes, within OTEP 4947's
/// recommended 640 and two cache lines.
pub const ATTRS_CAPACITY: usize = 96;

/// A record's encoded attributes: `attrs-data` of OTEP 4947 (key index,
/// length, UTF-8 value, packed).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct AttrBytes {
    pub(crate) len: u8,
    pub(crate) bytes: [u8; ATTRS_CAPACITY],
}

impl AttrBytes {
    pub(crate) const EMPTY: AttrBytes = AttrBytes {
        len: 0,
        bytes: [0; ATTRS_CAPACITY],
    };

    /// The encoded entries.
    pub(crate) fn as_slice(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// `(key index, value)` of each entry.
    pub(crate) fn entries(&self) -> impl Iterator<Item = (u8, &[u8])> {
        let mut at = 0;
        let data = self.as_slice();
        std::iter::from_fn(move || {
            let (&key, &len) = (data.get(at)?, data.get(at + 1)?);
            let value = data.get(at + 2..at + 2 + usize::from(len))?;
            at += 2 + usize::from(len);
            Some((key, value))
        })
    }

    /// `entries` encoded, in order, as far as they fit; the second value
    /// counts the values cut short or left out.
    pub(crate) fn encode<'a>(
        entries: impl IntoIterator<Item = (u8, &'a [u8])>,
    ) -> (AttrBytes, u64) {
        let mut out = AttrBytes::EMPTY;
        let mut cut = 0;
        let mut at = 0;
        for (key, value) in entries {
            // Room for the value after the entry's key and length.
            let Some(room) = ATTRS_CAPACITY.checked_sub(at + 2) else {
                cut += 1;
                continue;
            };
            let value = if value.len() > room.min(255) {
                cut += 1;
                match truncate_utf8(value, room.min(255)) {
                    // Cut to nothing (its first character does not fit):
                    // left out, not published as an empty value.
                    [] => continue,
                    kept => kept,
                }
            } else {
                value
            };
            out.bytes[at] = key;
            out.bytes[at + 1] = value.len() as u8;
            out.bytes[at + 2..at + 2 + value.len()].copy_from_slice(value);
            at += 2 + value.len();
        }
        out.len = at as u8;
        (out, cut)
    }
}

impl std::fmt::Debug for AttrBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(
                self.entries()
                    .map(|(k, v)| (k, String::from_utf8_lossy(v).into_owned())),
            )
            .finish()
    }
}

/// The longest prefix of `value` within `max` bytes that ends on a
/// character boundary (a value is UTF-8 text).
fn truncate_utf8(value: &[u8], max: usize) -> &[u8] {
    let mut end = max.min(value.len());
    while end > 0 && end < value.len() && (value[end] & 0xc0) == 0x80 {
        end -= 1;
    }
    &value[..end]
}

/// The process's `threadlocal.attribute_key_map`: append-only, as OTEP
/// 4947 asks (an index, once given, names its key for the process's life).
static KEY_MAP: Mutex<Vec<Key>> = Mutex::new(Vec::new());

/// Whether any publisher chose attributes: until one does, nothing is
/// looked up for a record.
static ACTIVE: AtomicBool = AtomicBool::new(false);

/// Each live span's encoded attributes, by span id (kept only for spans
/// with at least one chosen attribute).
static SPANS: RwLock<Option<HashMap<u64, AttrBytes>>> = RwLock::new(None);

/// Values cut short or left out because a record's attributes were full.
static CUT: AtomicU64 = AtomicU64::new(0);

/// The key map's names, in index order.
pub(crate) fn key_map() -> Vec<String> {
    KEY_MAP
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .map(|k| k.as_str().to_owned())
        .collect()
}

/// The encoded attributes of span `span_id`, if it has any.
#[inline]
pub(crate) fn of_span(span_id: u64) -> AttrBytes {
    // No span (0): nothing to look up.
    if span_id == 0 || !ACTIVE.load(Ordering::Relaxed) {
        return AttrBytes::EMPTY;
    }
    SPANS
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .and_then(|spans| spans.get(&span_id).copied())
        .unwrap_or(AttrBytes::EMPTY)
}

/// Why [`ContextPublisher::record_attributes`] refused its keys.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordAttributesError {
    /// An empty key.
    #[error("`ContextPublisher::record_attributes`: an attribute key is empty; name a span attribute such as \"http.route\"")]
    EmptyKey,
    /// More keys than a record's one-byte index can name.
    #[error(
        "`ContextPublisher::record_attributes`: the process's attribute key map would hold {0} \
         keys, and OTEP 4947 records index keys with one byte (at most 256); choose the few \
         low-cardinality attributes a profile needs (a route, a method)"
    )]
    TooManyKeys(usize),
}

/// The span processor that publishes the service's resource in the OTEP
/// 4719 process context and chosen attributes of each span in the OTEP
/// 4947 records of the threads it is current on. Add it to the tracer
/// provider (`with_span_processor`) that kspan is given:
///
/// ```
/// use opentelemetry_sdk::trace::SdkTracerProvider;
///
/// let publisher = kspan::context::ContextPublisher::new()
///     .record_attributes(["http.route", "http.request.method"])?;
/// let provider = SdkTracerProvider::builder()
///     .with_id_generator(kspan::KernelSpanIds::default())
///     .with_span_processor(publisher)
///     .build();
/// # let _ = provider;
/// # Ok::<(), kspan::context::RecordAttributesError>(())
/// ```
///
/// The provider hands it its resource when it is built, and the process
/// context is published then (and again, replaced, when kspan starts).
/// Without it, the process context carries the resource the SDK detects
/// by default (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, the SDK's
/// own attributes), and records carry no attributes.
///
/// Record attributes are the string form of each chosen attribute the span
/// was started with (or its nearest ancestor in the process, when it has
/// none of its own), at most 96 bytes a record in all; what does not fit
/// is cut (at a character boundary) or left out, and counted
/// ([`ContextPublisher::cut_values`]).
#[derive(Debug, Clone, Default)]
pub struct ContextPublisher {
    /// This publisher's keys and their indexes in the process's key map.
    keys: Vec<(Key, u8)>,
}

impl ContextPublisher {
    /// A publisher of the resource alone (no record attributes).
    pub fn new() -> Self {
        Self::default()
    }

    /// Chooses the span attributes copied into thread records, by key
    /// (low-cardinality ones: `http.route`, `http.request.method`,
    /// `rpc.method`). They join the process's key map, in order.
    pub fn record_attributes<K: Into<Key>>(
        mut self,
        keys: impl IntoIterator<Item = K>,
    ) -> Result<Self, RecordAttributesError> {
        let keys: Vec<Key> = keys.into_iter().map(Into::into).collect();
        if keys.iter().any(|k| k.as_str().is_empty()) {
            return Err(RecordAttributesError::EmptyKey);
        }
        let mut map = KEY_MAP.lock().unwrap_or_else(|p| p.into_inner());
        let added = keys
            .iter()
            .filter(|k| !map.contains(k))
            .collect::<std::collections::HashSet<_>>()
            .len();
        if map.len() + added > 256 {
            return Err(RecordAttributesError::TooManyKeys(map.len() + added));
        }
        for key in keys {
            let index = match map.iter().position(|k| *k == key) {
                Some(i) => i,
                None => {
                    map.push(key.clone());
                    map.len() - 1
                }
            };
            if !self.keys.iter().any(|(k, _)| *k == key) {
                self.keys.push((key, index as u8));
            }
        }
        drop(map);
        if added > 0 && process::is_published() {
            // Readers refresh their key map from the process context.
            if let Err(e) = process::publish_current(&key_map()) {
                crate::diagnostics::warn_user!(error = %e, "kspan did not update the process context's key map");
            }
        }
        if !self.keys.is_empty() {
            SPANS
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert_with(HashMap::new);
            ACTIVE.store(true, Ordering::Relaxed);
        }
        Ok(self)
    }

    /// The process's `threadlocal.attribute_key_map`: attribute names by
    /// index, as the process context publishes it.
    pub fn key_map(&self) -> Vec<String> {
        key_map()
    }

    /// Values cut short, or left out, because a record's attributes were
    /// full (in the whole process, since it started).
    pub fn cut_values() -> u64 {
        CUT.load(Ordering::Relaxed)
    }

    /// The encoded attributes of a span started in `parent` with
    /// `attributes`.
    fn encode(&self, attributes: &[KeyValue], parent: &Context) -> AttrBytes {
        let inherited = if parent.has_active_span() {
            of_span(u64::from_be_bytes(
                parent.span().span_context().span_id().to_bytes(),
            ))
        } else {
            AttrBytes::EMPTY
        };
        let own: Vec<(u8, String)> = self
            .keys
            .iter()
            .filter_map(|(key, index)| {
                let kv = attributes.iter().rev().find(|kv| kv.key == *key)?;
                Some((*index, kv.value.as_str().into_owned()))
            })
            .collect();
        if own.is_empty() {
            return inherited;
        }
        let kept = inherited
            .entries()
            .filter(|(key, _)| !own.iter().any(|(k, _)| k == key));
        let (bytes, cut) =
            AttrBytes::encode(kept.chain(own.iter().map(|(k, v)| (*k, v.as_bytes()))));
        if cut > 0 {
            CUT.fetch_add(cut, Ordering::Relaxed);
        }
        bytes
    }
}

impl ContextPublisher {
    /// [`SpanProcessor::on_end`]'s work, on a span another processor
    /// takes by value next (the SDK clones a finished span for each of
    /// several processors, so kspan's pipeline is one processor).
    pub(crate) fn span_ended(&self, span: &SpanData) {
        if self.keys.is_empty() {
            return;
        }
        let id = u64::from_be_bytes(span.span_context.span_id().to_bytes());
        if let Some(spans) = SPANS.write().unwrap_or_else(|p| p.into_inner()).as_mut() {
            spans.remove(&id);
        }
    }
}

impl SpanProcessor for ContextPublisher {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        if self.keys.is_empty() {
            return;
        }
        let Some(data) = span.exported_data() else {
            return;
        };
        let attrs = self.encode(&data.attributes, cx);
        if attrs.len == 0 {
            return;
        }
        let id = u64::from_be_bytes(data.span_context.span_id().to_bytes());
        if let Some(spans) = SPANS.write().unwrap_or_else(|p| p.into_inner()).as_mut() {
            spans.insert(id, attrs);
        }
    }

    fn on_end(&self, span: SpanData) {
        self.span_ended(&span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }

    fn set_resource(&mut self, resource: &Resource) {
        process::set_resource(resource);
        if let Err(e) = process::publish_current(&key_map()) {
            crate::diagnostics::warn_user!(error = %e, "kspan did not publish the process context");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_packed_and_cut_at_the_capacity() {
        let long = "x".repeat(200);
        let (bytes, cut) = AttrBytes::encode([(0, b"/a".as_slice()), (1, long.as_bytes())]);
        assert_eq!(&bytes.as_slice()[..4], &[0, 2, b'/', b'a']);
        assert_eq!(bytes.as_slice()[4], 1);
        assert_eq!(usize::from(bytes.len), ATTRS_CAPACITY, "filled to the end");
        assert_eq!(cut, 1);
        let (_, cut) = AttrBytes::encode([(0, long.as_bytes()), (1, b"y".as_slice())]);
        assert_eq!(cut, 2, "the first cut, the second left out");
    }

    #[test]
    fn a_cut_value_ends_on_a_character_boundary() {
        let text = "é".repeat(60); // 120 bytes of 2-byte characters
        let (bytes, _) = AttrBytes::encode([(0, b"abc".as_slice()), (1, text.as_bytes())]);
        let (_, value) = bytes.entries().nth(1).unwrap();
        assert!(std::str::from_utf8(value).is_ok(), "{value:?}");
        assert_eq!(
            value.len(),
            ATTRS_CAPACITY - 5 - 2 - 1,
            "an odd room, one byte short"
        );
    }

    /// Found by `context::properties`: a value whose first character did
    /// not fit was published as an empty value, and an empty value that
    /// fitted exactly was left out.
    #[test]
    fn values_that_do_not_fit_are_left_out_and_empty_ones_that_do_are_kept() {
        let filler = "x".repeat(ATTRS_CAPACITY - 2 - 2 - 1); // leaves 3 bytes
        let (bytes, cut) = AttrBytes::encode([(0, filler.as_bytes()), (1, "€".as_bytes())]);
        assert_eq!(bytes.entries().count(), 1, "{bytes:?}");
        assert_eq!(cut, 1);
        let filler = "x".repeat(ATTRS_CAPACITY - 2 - 2); // leaves 2 bytes
        let (bytes, cut) = AttrBytes::encode([(0, filler.as_bytes()), (1, b"".as_slice())]);
        assert_eq!(
            bytes.entries().nth(1),
            Some((1, b"".as_slice())),
            "{bytes:?}"
        );
        assert_eq!((usize::from(bytes.len), cut), (ATTRS_CAPACITY, 0));
    }

    #[test]
    fn keys_are_checked() {
        assert_eq!(
            ContextPublisher::new().record_attributes([""]).unwrap_err(),
            RecordAttributesError::EmptyKey
        );
        let many: Vec<String> = (0..300).map(|i| format!("k{i}")).collect();
        assert!(matches!(
            ContextPublisher::new().record_attributes(many),
            Err(RecordAttributesError::TooManyKeys(_))
        ));
    }
}
