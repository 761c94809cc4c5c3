// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Property tests of the reader's parsers (issue 52), each against a
//! writer that is not the reader: kspan's own thread record
//! (`kspan::context::ThreadContextRecord`, as it lies in memory), records'
//! attributes and `/proc/PID/maps` lines written as the OTEP and the kernel
//! write them, and process contexts encoded by prost (opentelemetry-proto's
//! messages). What is written reads back equal; any bytes at all are read
//! or refused, never a panic.
//!
//! `PROPTEST_CASES=10000 cargo test -p kspan-tests --lib otep_reader::properties`
//! runs more than the default 256 cases.

use kspan::context::ThreadContextRecord;
use opentelemetry_proto::tonic::common::v1::{
    any_value, AnyValue, ArrayValue, KeyValue, KeyValueList,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use proptest::prelude::*;
use proptest::test_runner::Config;
use prost::Message as _;

use super::{
    decode_process_context, parse_attrs_data, parse_maps_line, parse_record_header, Value,
    RECORD_HEADER_LEN,
};

fn config() -> Config {
    Config {
        failure_persistence: None,
        ..Config::default()
    }
}

// -- Thread records -----------------------------------------------------------

/// The bytes of `record` as a reader finds them in the writer's memory.
fn in_memory(record: &ThreadContextRecord) -> [u8; RECORD_HEADER_LEN] {
    let mut bytes = [0u8; RECORD_HEADER_LEN];
    // SAFETY: the record is `repr(C)`, 28 bytes of integers and byte
    // arrays with no padding (kspan asserts its layout).
    unsafe {
        std::ptr::copy_nonoverlapping(
            (record as *const ThreadContextRecord).cast::<u8>(),
            bytes.as_mut_ptr(),
            RECORD_HEADER_LEN,
        )
    };
    bytes
}

/// `attrs-data` as OTEP 4947 lays it out: key, length, value, packed.
fn attrs_data(entries: &[(u8, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (key, value) in entries {
        out.push(*key);
        out.push(value.len() as u8);
        out.extend_from_slice(value);
    }
    out
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn kspan_s_records_read_back_as_written(
        trace_id in any::<[u8; 16]>(),
        span_id in any::<[u8; 8]>(),
        valid in any::<u8>(),
        trace_flags in any::<u8>(),
        attrs_data_size in any::<u16>(),
    ) {
        let record = ThreadContextRecord { trace_id, span_id, valid, trace_flags, attrs_data_size };
        let read = parse_record_header(&in_memory(&record));
        prop_assert_eq!(read.trace_id, trace_id);
        prop_assert_eq!(read.span_id, span_id);
        prop_assert_eq!(read.valid, valid);
        prop_assert_eq!(read.is_valid(), valid == 1);
        prop_assert_eq!(read.trace_flags, trace_flags);
        prop_assert_eq!(read.attrs_data_size, attrs_data_size);
    }

    #[test]
    fn record_attributes_read_back_as_written(
        entries in prop::collection::vec(
            (any::<u8>(), prop::collection::vec(any::<u8>(), 0..=255)),
            0..5,
        ),
    ) {
        prop_assert_eq!(parse_attrs_data(&attrs_data(&entries)), entries);
    }

    /// Cut anywhere, the entries read are the complete ones before the cut.
    #[test]
    fn record_attributes_cut_short_read_the_complete_entries(
        entries in prop::collection::vec(
            (any::<u8>(), prop::collection::vec(any::<u8>(), 0..40)),
            0..5,
        ),
        cut in any::<prop::sample::Index>(),
    ) {
        let data = attrs_data(&entries);
        let cut = cut.index(data.len() + 1);
        let mut complete = Vec::new();
        let mut end = 0;
        for entry in &entries {
            end += 2 + entry.1.len();
            if end > cut {
                break;
            }
            complete.push(entry.clone());
        }
        prop_assert_eq!(parse_attrs_data(&data[..cut]), complete);
    }

    #[test]
    fn any_attribute_bytes_are_read_without_a_panic(data in prop::collection::vec(any::<u8>(), 0..300)) {
        let entries = parse_attrs_data(&data);
        let used: usize = entries.iter().map(|(_, v)| 2 + v.len()).sum();
        prop_assert!(used <= data.len());
        // What was read is the start of the bytes, written back.
        prop_assert_eq!(&attrs_data(&entries)[..], &data[..used]);
    }
}

// -- /proc/PID/maps -------------------------------------------------------------

proptest! {
    #![proptest_config(config())]

    /// A line as the kernel writes it (`show_map_vma`): start-end, perms,
    /// offset, major:minor, inode, then the name after padding.
    #[test]
    fn maps_lines_read_back_as_written(
        start in any::<u64>(),
        end in any::<u64>(),
        perms in "[r-][w-][x-][ps]",
        offset in any::<u64>(),
        (major, minor) in (any::<u32>(), any::<u32>()),
        inode in any::<u64>(),
        padding in " {0,26}",
        name in prop_oneof![
            Just(String::new()),
            "[^ \t\n][^\n]{0,40}",
            Just("/memfd:OTEL_CTX (deleted)".to_owned()),
            Just("[anon:OTEL_CTX]".to_owned()),
        ],
    ) {
        let line = format!(
            "{start:08x}-{end:08x} {perms} {offset:08x} {major:02x}:{minor:02x} {inode} {padding}{name}"
        );
        let entry = parse_maps_line(&line)
            .ok_or_else(|| TestCaseError::fail(format!("{line:?} not read")))?;
        prop_assert_eq!(entry.start, start);
        prop_assert_eq!(entry.end, end);
        prop_assert_eq!(entry.pathname, name);
    }

    #[test]
    fn any_maps_line_is_read_or_refused_without_a_panic(line in any::<String>()) {
        if let Some(entry) = parse_maps_line(&line) {
            prop_assert!(line.contains(&entry.pathname));
        }
    }
}

// -- Process contexts (OTEP 4719) -------------------------------------------------

/// An `AnyValue` and what the reader should make of it.
fn any_value() -> impl Strategy<Value = (Option<AnyValue>, Value)> {
    let leaf = prop_oneof![
        ".{0,12}".prop_map(|s| (
            Some(any_value::Value::StringValue(s.clone())),
            Value::Str(s)
        )),
        any::<bool>().prop_map(|b| (Some(any_value::Value::BoolValue(b)), Value::Bool(b))),
        any::<i64>().prop_map(|i| (Some(any_value::Value::IntValue(i)), Value::Int(i))),
        // Not NaN: it equals nothing, itself included.
        (prop::num::f64::NORMAL
            | prop::num::f64::ZERO
            | prop::num::f64::INFINITE
            | prop::num::f64::SUBNORMAL)
            .prop_map(|d| (Some(any_value::Value::DoubleValue(d)), Value::Double(d))),
        prop::collection::vec(any::<u8>(), 0..8)
            .prop_map(|b| (Some(any_value::Value::BytesValue(b)), Value::Other)),
        Just((
            Some(any_value::Value::KvlistValue(KeyValueList::default())),
            Value::Other
        )),
        Just((None, Value::Other)),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop::collection::vec(inner, 0..4).prop_map(|values| {
            let (encoded, read): (Vec<_>, Vec<_>) = values
                .into_iter()
                .map(|(v, r)| (AnyValue { value: v }, r))
                .unzip();
            (
                Some(any_value::Value::ArrayValue(ArrayValue { values: encoded })),
                Value::Array(read),
            )
        })
    })
    .prop_map(|(v, r)| (Some(AnyValue { value: v }), r))
}

fn key_values() -> impl Strategy<Value = Vec<(KeyValue, (String, Value))>> {
    prop::collection::vec(
        (".{0,10}", any_value(), any::<bool>()).prop_map(|(key, (value, read), absent)| {
            // A value left out reads as no member set.
            let (value, read) = if absent {
                (None, Value::Other)
            } else {
                (value, read)
            };
            (
                KeyValue {
                    key: key.clone(),
                    value,
                    ..KeyValue::default()
                },
                (key, read),
            )
        }),
        0..5,
    )
}

/// `message ProcessContext { Resource resource = 1; repeated KeyValue
/// attributes = 2; }`, with prost encoding each message.
fn process_context(resource: &Resource, attributes: &[KeyValue]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut field = |number: u32, bytes: Vec<u8>| {
        prost::encoding::encode_key(number, prost::encoding::WireType::LengthDelimited, &mut out);
        prost::encoding::encode_varint(bytes.len() as u64, &mut out);
        out.extend_from_slice(&bytes);
    };
    field(1, resource.encode_to_vec());
    for kv in attributes {
        field(2, kv.encode_to_vec());
    }
    out
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn process_contexts_read_back_as_encoded(resource in key_values(), attributes in key_values()) {
        let (resource_kvs, resource_read): (Vec<_>, Vec<_>) = resource.into_iter().unzip();
        let (attribute_kvs, attributes_read): (Vec<_>, Vec<_>) = attributes.into_iter().unzip();
        let payload = process_context(
            &Resource { attributes: resource_kvs, ..Resource::default() },
            &attribute_kvs,
        );
        let read = decode_process_context(&payload).map_err(TestCaseError::fail)?;
        prop_assert_eq!(read, (resource_read, attributes_read));
    }

    #[test]
    fn any_payload_is_read_or_refused_without_a_panic(payload in prop::collection::vec(any::<u8>(), 0..200)) {
        if let Err(e) = decode_process_context(&payload) {
            prop_assert!(e.contains(" at byte ") || e.contains("nested"), "{e}");
        }
    }

    /// A valid payload garbled in one byte, or cut short: read or refused,
    /// never a panic.
    #[test]
    fn garbled_payloads_are_read_or_refused_without_a_panic(
        attributes in key_values(),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
        cut in any::<bool>(),
    ) {
        let (kvs, _): (Vec<_>, Vec<_>) = attributes.into_iter().unzip();
        let mut payload = process_context(&Resource::default(), &kvs);
        let i = at.index(payload.len());
        if cut {
            payload.truncate(i);
        } else {
            payload[i] = byte;
        }
        let _ = decode_process_context(&payload);
    }
}
