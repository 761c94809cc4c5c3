// SPDX-License-Identifier: Apache-2.0 OR MIT
//! One binary on every kernel of the matrix (the `unlinks` example, run in
//! the VM by `cargo xtask test`): its probe names `do_unlinkat` (6.x) and
//! `filename_unlinkat` (7.x), traces the one the kernel has, and records
//! every unlink the service makes, path and result; its optional probe on a
//! function no kernel has is left out, said in the attach plan, in `Stats`
//! and once in the log, and the service runs.

use kspan_tests::{assert_children_of, example, run_with_receiver, spans_of_thread, the_span};

const FILES: usize = 5;
/// `AT_FDCWD`: `unlink(2)` is `unlinkat(AT_FDCWD, path, 0)`.
const AT_FDCWD: i64 = -100;

/// The unlink function this kernel has, by its BTF; on 7.x, where Linux
/// renamed it, `filename_unlinkat`.
fn unlink_function() -> &'static str {
    let btf = kspan::kernel::read_btf(std::path::Path::new(kspan::KERNEL_BTF)).unwrap();
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let function = if btf.has_function("do_unlinkat") {
        "do_unlinkat"
    } else {
        "filename_unlinkat"
    };
    assert!(btf.has_function(function), "{release}: neither in BTF");
    if release.starts_with("7.") {
        assert_eq!(function, "filename_unlinkat", "{release}");
    }
    function
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs a kernel with BPF trampolines (fexit); run by `cargo xtask test` in the VM"]
async fn the_function_this_kernel_has_is_traced_and_the_optional_probe_left_out() {
    let function = unlink_function();
    let dir = std::env::temp_dir().join(format!("kspan-unlinks-{}", std::process::id()));
    let run = run_with_receiver(
        &example("unlinks"),
        &[dir.to_str().unwrap(), &FILES.to_string()],
        "unlinks-test",
    )
    .await;
    let (stdout, stderr) = (run.stdout(), run.stderr());
    assert!(run.output.status.success(), "{stdout}\n{stderr}");

    // The attach plan: the probe on the function this kernel has, saying
    // what it passed over; the optional one not attached, saying why.
    let plan: Vec<&str> = stdout.lines().filter(|l| l.starts_with("plan\t")).collect();
    let passed_over = if function == "do_unlinkat" {
        "-"
    } else {
        "`do_unlinkat`: not in this kernel's BTF"
    };
    assert_eq!(
        plan,
        [
            format!("plan\t{function}\tfexit\tpassed over: {passed_over}\tnot attached: -"),
            "plan\tkspan_example_no_such_function\tfexit\tpassed over: \
             `kspan_example_no_such_function`: not in this kernel's BTF\tnot attached: an \
             optional probe, and this kernel can trace none of its functions: \
             `kspan_example_no_such_function`: not in this kernel's BTF"
                .to_owned(),
        ],
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "removed {FILES} files and 1 missing; 1 probes not attached; kspan: "
        )),
        "{stdout}"
    );
    assert_eq!(
        kspan_tests::assert_all_acknowledged(&stdout),
        FILES as u64 + 1,
        "a span for every unlink, the missing file's too: {stdout}"
    );
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("kspan starts without an optional probe"))
        .collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(
        warnings[0].contains("\"kspan_example_no_such_function\"")
            && warnings[0].contains("not in this kernel's BTF"),
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("kspan traces an alternative").count(),
        usize::from(function == "filename_unlinkat"),
        "{stderr}"
    );

    // One span per unlink, in order, under the application span.
    let app = the_span(&run.spans, "remove_files");
    let mut spans = spans_of_thread(
        &run.spans,
        function,
        i64::from(run.pid),
        app.start_ns,
        app.end_ns,
    );
    spans.sort_by_key(|s| s.start_ns);
    assert_children_of(&spans, app);
    let seen: Vec<(String, i64, i64)> = spans
        .iter()
        .map(|s| {
            (
                s.str("kernel.arg.name").unwrap_or("?").to_owned(),
                s.int("kernel.arg.dfd").unwrap_or(0),
                s.int("kernel.return_value").unwrap_or(1),
            )
        })
        .collect();
    let mut expected: Vec<(String, i64, i64)> = (0..FILES)
        .map(|i| {
            let path = dir.join(format!("unlink-{i}.txt"));
            (path.to_str().unwrap().to_owned(), AT_FDCWD, 0)
        })
        .collect();
    let missing = dir.join("unlink-missing.txt");
    expected.push((missing.to_str().unwrap().to_owned(), AT_FDCWD, -2));
    assert_eq!(seen, expected, "{:#?}", spans);
    assert_eq!(spans[FILES].str("error.type"), Some("ENOENT"));
    let other = if function == "do_unlinkat" {
        "filename_unlinkat"
    } else {
        "do_unlinkat"
    };
    assert!(
        run.spans.iter().all(|s| s.name != other),
        "only the function chosen is traced"
    );
}
