// SPDX-License-Identifier: Apache-2.0 OR MIT
//! `kspan-receive [--port N] -- PROGRAM [ARGS...]`: runs PROGRAM with its OTLP
//! exporter pointed at a receiver on loopback, then prints the spans that
//! arrived as a tree, kernel spans under their parents. `cargo xtask demo`
//! runs the quickstart through it.

use std::collections::HashMap;
use std::path::Path;
use std::process::ExitCode;

use kspan_tests::{run_with_receiver, AttrValue, ReceivedSpan};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn show(span: &ReceivedSpan, depth: usize, t0: u64) -> String {
    let mut attrs: Vec<String> = span
        .attributes
        .iter()
        .filter(|(k, _)| {
            k.starts_with("kernel.arg")
                || k.as_str() == "kernel.return_value"
                || k.as_str() == "kspan.tid"
                || k.as_str() == "thread.id"
        })
        .map(|(k, v)| {
            let v = match v {
                AttrValue::Str(s) => s.clone(),
                AttrValue::Int(i) => i.to_string(),
                AttrValue::Bool(b) => b.to_string(),
                AttrValue::Double(d) => d.to_string(),
                AttrValue::Other(o) => o.clone(),
            };
            format!("{}={v}", k.trim_start_matches("kernel.arg."))
        })
        .collect();
    attrs.sort();
    format!(
        "{:indent$}{} [{:>9.3} ms +{:.3} ms] span {} {}",
        "",
        span.name,
        span.start_ns.saturating_sub(t0) as f64 / 1e6,
        span.end_ns.saturating_sub(span.start_ns) as f64 / 1e6,
        hex(&span.span_id),
        attrs.join(" "),
        indent = depth * 2
    )
}

fn print_tree(spans: &[ReceivedSpan]) {
    let t0 = spans.iter().map(|s| s.start_ns).min().unwrap_or(0);
    let ids: std::collections::HashSet<&[u8]> =
        spans.iter().map(|s| s.span_id.as_slice()).collect();
    let mut children: HashMap<&[u8], Vec<&ReceivedSpan>> = HashMap::new();
    let mut roots = Vec::new();
    for s in spans {
        if s.parent_span_id.is_empty() || !ids.contains(s.parent_span_id.as_slice()) {
            roots.push(s);
        } else {
            children
                .entry(s.parent_span_id.as_slice())
                .or_default()
                .push(s);
        }
    }
    fn walk(
        s: &ReceivedSpan,
        depth: usize,
        t0: u64,
        children: &HashMap<&[u8], Vec<&ReceivedSpan>>,
    ) {
        println!("{}", show(s, depth, t0));
        let mut kids = children
            .get(s.span_id.as_slice())
            .cloned()
            .unwrap_or_default();
        kids.sort_by_key(|k| k.start_ns);
        for k in kids {
            walk(k, depth + 1, t0, children);
        }
    }
    roots.sort_by_key(|s| s.start_ns);
    for r in roots {
        println!(
            "trace {} ({})",
            hex(&r.trace_id),
            r.service_name.as_deref().unwrap_or("?")
        );
        walk(r, 1, t0, &children);
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(sep) = args.iter().position(|a| a == "--") else {
        eprintln!("usage: kspan-receive -- PROGRAM [ARGS...]");
        return ExitCode::from(2);
    };
    let Some(program) = args.get(sep + 1) else {
        eprintln!("usage: kspan-receive -- PROGRAM [ARGS...]");
        return ExitCode::from(2);
    };
    let rest: Vec<&str> = args[sep + 2..].iter().map(String::as_str).collect();
    let service = std::env::var("OTEL_SERVICE_NAME").unwrap_or_else(|_| "kspan-demo".into());
    let run = run_with_receiver(Path::new(program), &rest, &service).await;
    print!("{}", run.stdout());
    eprint!("{}", run.stderr());
    println!("--- {} spans received over OTLP/gRPC ---", run.spans.len());
    print_tree(&run.spans);
    if run.output.status.success() {
        ExitCode::SUCCESS
    } else {
        eprintln!("{program} failed: {}", run.output.status);
        ExitCode::FAILURE
    }
}
