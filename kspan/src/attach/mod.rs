// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Attaching every planned probe: the order, `auto`'s fallback from one
//! hook to the next, and the decision recorded for each function.
//!
//! In the order data flows: what attaching reports ([`report`]: the
//! decision for each function, the errors); which hooks and attachments a
//! probe may use here and in what order ([`choice`]); what the attach of
//! many functions carries from one to the next and the steps every hook
//! shares ([`attacher`]); each hook's module ([`trampoline`], [`kprobe`],
//! [`tracepoint`]); the run
//! over every plan that drives them ([`sequence`]). The links that hold
//! programs attached are the core's ([`crate::bpf::links`]). The exit program is attached before
//! the entry program, so that no entry is recorded whose exit is not
//! watched; a function whose attach fails keeps nothing.

mod attacher;
mod choice;
mod hint;
mod kprobe;
mod report;
mod sequence;
mod tracepoint;
mod trampoline;

pub(crate) use attacher::Attacher;
pub(crate) use choice::{multi_links_take_all, registration_skips};

pub use report::{AttachDecision, AttachError};
pub(crate) use sequence::Attached;
