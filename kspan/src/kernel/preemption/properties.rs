// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Property tests of the preemption model's sources (issue 52): the
//! running mode of debugfs's list, the `preempt=` a command line leaves in
//! force (the kernel's rule: each one in order, an unsupported value
//! ignored), and the model a config builds, read back as the kernel wrote
//! them; any text is read without a panic.
//!
//! `PROPTEST_CASES=10000 cargo test -p kspan --lib kernel::preemption::properties`
//! runs more than the default 256 cases.

use proptest::prelude::*;
use proptest::test_runner::Config;

use super::{parse_cmdline, parse_config, parse_debugfs, PreemptionModel};

fn config() -> Config {
    Config {
        failure_persistence: None,
        ..Config::default()
    }
}

/// The modes `preempt=` and debugfs take (`sched_dynamic_mode`).
const DYNAMIC: [PreemptionModel; 4] = [
    PreemptionModel::None,
    PreemptionModel::Voluntary,
    PreemptionModel::Full,
    PreemptionModel::Lazy,
];

/// A command-line word: a `preempt=` of a mode, of something else, or
/// another parameter.
fn word() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(DYNAMIC.to_vec()).prop_map(|m| format!("preempt={}", m.as_str())),
        prop::sample::select(vec!["rt", "", "sometimes", "Full"])
            .prop_map(|v| format!("preempt={v}")),
        "[a-z_]{1,8}(=[a-z0-9/]{0,6})?",
        Just("nopreempt=full".to_owned()),
    ]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn debugfs_s_running_mode_reads_back(
        listed in prop::sample::subsequence(DYNAMIC.to_vec(), 1..=4),
        running in any::<prop::sample::Index>(),
    ) {
        let running = running.index(listed.len());
        // `sched_dynamic_show`: every mode, the running one in parentheses.
        let mut text = String::new();
        for (i, mode) in listed.iter().enumerate() {
            if i == running {
                text.push_str(&format!("({}) ", mode.as_str()));
            } else {
                text.push_str(&format!("{} ", mode.as_str()));
            }
        }
        text.push('\n');
        prop_assert_eq!(parse_debugfs(&text), Some(listed[running]));
    }

    #[test]
    fn the_preempt_in_force_is_read_from_the_command_line(
        words in prop::collection::vec(word(), 0..8),
        spaces in prop::collection::vec(" {1,3}", 8),
    ) {
        let text = words
            .iter()
            .zip(&spaces)
            .map(|(w, s)| format!("{w}{s}"))
            .collect::<String>();
        // Each `preempt=` in order; an unsupported mode leaves the one before.
        let in_force = words
            .iter()
            .filter_map(|w| w.strip_prefix("preempt="))
            .filter_map(|v| DYNAMIC.into_iter().find(|m| m.as_str() == v))
            .next_back();
        prop_assert_eq!(parse_cmdline(&text), in_force, "{:?}", text);
    }

    #[test]
    fn a_config_s_model_reads_back(
        model in prop::sample::select(vec![
            ("CONFIG_PREEMPT_NONE", PreemptionModel::None),
            ("CONFIG_PREEMPT_VOLUNTARY", PreemptionModel::Voluntary),
            ("CONFIG_PREEMPT", PreemptionModel::Full),
            ("CONFIG_PREEMPT_LAZY", PreemptionModel::Lazy),
            ("CONFIG_PREEMPT_RT", PreemptionModel::Rt),
        ]),
        before in prop::collection::vec("(# )?CONFIG_[A-Z_]{1,12}(=[ymn]| is not set)", 0..6),
    ) {
        let (option, expected) = model;
        let lines: Vec<String> = before
            .into_iter()
            .filter(|l| !l.starts_with("CONFIG_PREEMPT"))
            .chain([format!("{option}=y")])
            .collect();
        prop_assert_eq!(parse_config(&lines.join("\n")), Some(expected));
    }

    #[test]
    fn any_text_is_read_without_a_panic(text in any::<String>()) {
        let _ = parse_debugfs(&text);
        let _ = parse_cmdline(&text);
        let _ = parse_config(&text);
    }
}
