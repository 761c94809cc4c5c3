// SPDX-License-Identifier: Apache-2.0 OR MIT
//! How the account's programs were refused, in words that name them and
//! the fix: its own errors, not a probe's.

use super::SchedMechanism;
use crate::bpf::object::LoadFailure;
use crate::bpf::program::Program;
use crate::bpf::{errno_of, perf_event_refused};
use crate::kernel::errno;

/// The scheduler's account could not be loaded or attached
/// ([`KspanBuilder::scheduler_account`](crate::KspanBuilder::scheduler_account)).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AccountError {
    /// The kernel refused to load the account's programs.
    #[error(
        "cannot load the scheduler account's {mechanism} programs: {reason} ({errno_name}){}",
        verifier_log.as_deref().map(|l| format!("\nverifier log:\n{l}")).unwrap_or_default()
    )]
    Load {
        /// The mechanism whose programs were refused.
        mechanism: SchedMechanism,
        /// The kernel's errno (positive), when known.
        errno: Option<i32>,
        /// Its symbolic name (`EPERM`), or "errno unknown".
        errno_name: String,
        /// What the errno means here, and what to do.
        reason: String,
        /// The verifier's log, when the verifier ran.
        verifier_log: Option<String>,
        /// The libbpf error.
        #[source]
        source: libbpf_rs::Error,
    },
    /// A program loaded but the kernel refused to attach it.
    #[error(
        "cannot attach the scheduler account's {mechanism} program to `{event}`: {reason} \
         ({errno_name})"
    )]
    Attach {
        /// The mechanism.
        mechanism: SchedMechanism,
        /// The tracepoint (`sched:sched_switch`).
        event: String,
        /// The kernel's errno (positive), when known.
        errno: Option<i32>,
        /// Its symbolic name.
        errno_name: String,
        /// What the errno means here.
        reason: String,
        /// The system call's error.
        #[source]
        source: std::io::Error,
    },
    /// A classic tracepoint's fields are not where the account's programs
    /// read them, or its format cannot be read.
    #[error("cannot attach the scheduler account to `{event}`: {reason}")]
    Format {
        /// The tracepoint.
        event: String,
        /// What differs.
        reason: String,
    },
}

impl AccountError {
    pub(super) fn load(mechanism: SchedMechanism, failure: LoadFailure) -> Self {
        let errno = errno_of(&failure.source);
        AccountError::Load {
            mechanism,
            errno,
            errno_name: errno::name_of(errno).into_owned(),
            reason: refusal_reason(errno, mechanism, "load"),
            verifier_log: failure.verifier_log,
            source: failure.source,
        }
    }

    pub(super) fn refused(mechanism: SchedMechanism, event: &str, source: std::io::Error) -> Self {
        let errno = source.raw_os_error();
        AccountError::Attach {
            mechanism,
            event: event.to_owned(),
            errno,
            errno_name: errno::name_of(errno).into_owned(),
            reason: refusal_reason(errno, mechanism, "attach"),
            source,
        }
    }

    /// A load that did not give back a program it was asked for.
    pub(super) fn missing(mechanism: SchedMechanism, program: Program) -> Self {
        AccountError::load(
            mechanism,
            LoadFailure {
                source: libbpf_rs::Error::from(std::io::Error::other(format!(
                    "the load did not give the {program:?} program"
                ))),
                verifier_log: None,
            },
        )
    }
}

/// What a refusal to `step` (load, attach) the account's programs means.
fn refusal_reason(errno: Option<i32>, mechanism: SchedMechanism, step: &str) -> String {
    match (errno, mechanism) {
        (Some(libc::EACCES), SchedMechanism::Tracepoints) => perf_event_refused("sched tracepoint"),
        _ => format!("the kernel refused to {step} the {mechanism} program"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(errno: i32) -> LoadFailure {
        LoadFailure {
            source: libbpf_rs::Error::from_raw_os_error(errno),
            verifier_log: None,
        }
    }

    #[test]
    fn a_refused_load_names_the_account_and_its_mechanism_not_a_probe() {
        let e = AccountError::load(SchedMechanism::BtfTracepoints, refused(libc::EPERM));
        let message = e.to_string();
        assert!(
            message.starts_with("cannot load the scheduler account's tp_btf programs: "),
            "{message}"
        );
        assert!(message.contains("(EPERM)"), "{message}");
        assert!(!message.contains("syscall"), "{message}");
        assert!(matches!(
            e,
            AccountError::Load {
                errno: Some(libc::EPERM),
                ..
            }
        ));
    }

    #[test]
    fn a_refused_perf_event_says_what_the_process_lacks() {
        let e = AccountError::refused(
            SchedMechanism::Tracepoints,
            "sched:sched_switch",
            std::io::Error::from_raw_os_error(libc::EACCES),
        );
        let message = e.to_string();
        assert!(
            message.starts_with(
                "cannot attach the scheduler account's tracepoint program to `sched:sched_switch`: "
            ),
            "{message}"
        );
        assert!(message.contains("CAP_PERFMON"), "{message}");
        assert!(message.contains("(EACCES)"), "{message}");
    }
}
