// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Opening kspan's object through its libbpf skeleton, the first step of
//! both making the shared maps ([`super::maps`]) and loading programs
//! ([`super::object`]), and how libbpf's refusals come back from either.

use std::mem::MaybeUninit;

use kspan_bpf::{KspanSkelBuilder, OpenKspanSkel};
use libbpf_rs::skel::SkelBuilder;
use libbpf_rs::OpenObject;

/// Why libbpf could not open or load kspan's object: its error and, when
/// the verifier ran, its log. The caller says for what (a probe's
/// function, the account).
#[derive(Debug)]
pub(crate) struct LoadFailure {
    pub source: libbpf_rs::Error,
    pub verifier_log: Option<String>,
}

impl LoadFailure {
    pub(crate) fn new(source: libbpf_rs::Error) -> Self {
        LoadFailure {
            source,
            verifier_log: None,
        }
    }
}

impl From<libbpf_rs::Error> for LoadFailure {
    fn from(source: libbpf_rs::Error) -> Self {
        LoadFailure::new(source)
    }
}

/// Tells libbpf, once per process, the sections of the object it does not
/// know: `fsession.multi` (a tracing program of attach type
/// `BPF_TRACE_FSESSION_MULTI`, loaded with no target; libbpf 1.7 has
/// fsession but not its multi-function form). This is libbpf's own
/// extension point for custom sections. Without it (a libbpf that refuses
/// the registration) that program cannot load, and fsession.multi batches
/// fall back to one function at a time, saying why.
fn register_sections() {
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    REGISTERED.call_once(|| {
        let opts = libbpf_rs::libbpf_sys::libbpf_prog_handler_opts {
            sz: std::mem::size_of::<libbpf_rs::libbpf_sys::libbpf_prog_handler_opts>() as _,
            ..Default::default()
        };
        // SAFETY: the section name is a NUL-terminated static string and
        // `opts` is initialised with its size; libbpf copies both.
        let id = unsafe {
            libbpf_rs::libbpf_sys::libbpf_register_prog_handler(
                c"fsession.multi".as_ptr(),
                libbpf_rs::libbpf_sys::BPF_PROG_TYPE_TRACING,
                super::sys::BPF_TRACE_FSESSION_MULTI,
                &opts,
            )
        };
        if id < 0 {
            tracing::debug!(errno = -id, "libbpf refused kspan's fsession.multi section");
        }
    });
}

/// Opens kspan's object: the skeleton, with the sections kspan adds known
/// to libbpf.
pub(super) fn open_object(
    storage: &mut MaybeUninit<OpenObject>,
) -> Result<OpenKspanSkel<'_>, LoadFailure> {
    register_sections();
    Ok(KspanSkelBuilder::default().open(storage)?)
}
