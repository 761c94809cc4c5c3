// SPDX-License-Identifier: Apache-2.0 OR MIT
//! One compile-fail test per error message of `#[kernel_span]`.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/fail/*.rs");
}
