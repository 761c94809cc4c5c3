// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Property test of the OTEP 4719 process context (issue 52), writer to
//! reader, in a process of its own (there is one context per process): a
//! provider built with any resource and a `ContextPublisher` publishes it,
//! and the reader written from the OTEP text alone
//! (`kspan_tests::otep_reader`) reads every attribute back equal, with
//! `threadlocal.schema_version`. Each case replaces the last in place.
//!
//! `PROPTEST_CASES=2000 cargo test -p kspan-tests --test host_process_context_props`
//! runs more than the default 256 cases.

use kspan_tests::otep_reader::{read_process_context, Value as Read};
use opentelemetry::{Array, KeyValue, StringValue, Value};
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use proptest::prelude::*;
use proptest::test_runner::Config;

fn config() -> Config {
    Config {
        failure_persistence: None,
        ..Config::default()
    }
}

/// Not NaN: it equals nothing, itself included.
fn double() -> impl Strategy<Value = f64> {
    prop::num::f64::NORMAL | prop::num::f64::ZERO | prop::num::f64::INFINITE
}

/// A resource attribute's value, and what a reader should read.
fn value() -> impl Strategy<Value = (Value, Read)> {
    prop_oneof![
        ".{0,16}".prop_map(|s| (Value::from(s.clone()), Read::Str(s))),
        any::<bool>().prop_map(|b| (Value::Bool(b), Read::Bool(b))),
        any::<i64>().prop_map(|i| (Value::I64(i), Read::Int(i))),
        double().prop_map(|d| (Value::F64(d), Read::Double(d))),
        prop::collection::vec(any::<bool>(), 0..4).prop_map(|v| (
            Value::Array(Array::Bool(v.clone())),
            Read::Array(v.into_iter().map(Read::Bool).collect()),
        )),
        prop::collection::vec(any::<i64>(), 0..4).prop_map(|v| (
            Value::Array(Array::I64(v.clone())),
            Read::Array(v.into_iter().map(Read::Int).collect()),
        )),
        prop::collection::vec(double(), 0..4).prop_map(|v| (
            Value::Array(Array::F64(v.clone())),
            Read::Array(v.into_iter().map(Read::Double).collect()),
        )),
        prop::collection::vec(".{0,8}", 0..4).prop_map(|v| (
            Value::Array(Array::String(
                v.iter().cloned().map(StringValue::from).collect()
            )),
            Read::Array(v.into_iter().map(Read::Str).collect()),
        )),
    ]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn a_published_resource_reads_back_as_written(
        // `k.` keeps clear of the SDK's own keys (`service.name`, ...).
        attributes in prop::collection::btree_map(".{0,12}".prop_map(|k| format!("k.{k}")), value(), 0..6),
    ) {
        let resource = Resource::builder_empty()
            .with_attributes(
                attributes.iter().map(|(k, (v, _))| KeyValue::new(k.clone(), v.clone())),
            )
            .build();
        let provider = SdkTracerProvider::builder()
            .with_resource(resource)
            .with_span_processor(kspan::context::ContextPublisher::new())
            .build();
        let read = read_process_context(std::process::id() as i32)
            .map_err(TestCaseError::fail)?
            .ok_or_else(|| TestCaseError::fail("no process context published"))?;
        prop_assert_eq!(read.schema_version(), Some(kspan::context::SCHEMA_VERSION));
        for (key, (_, expected)) in &attributes {
            prop_assert_eq!(read.resource_attribute(key), Some(expected), "{}", key);
        }
        let ours = read.resource.iter().filter(|(k, _)| k.starts_with("k.")).count();
        prop_assert_eq!(ours, attributes.len(), "{:?}", read.resource);
        drop(provider);
    }
}
