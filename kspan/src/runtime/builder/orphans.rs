// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Saying, once per runtime, that calls are dropped as orphans while no
//! kernel span has been exported. With `Orphans::Drop` (the default), a
//! program whose calls are all made outside application spans would
//! otherwise export nothing and say nothing (only
//! `Stats::orphans_dropped` moves). The consumer checks on its tick, never
//! per record.

/// Whether the runtime is still to say it.
#[derive(Debug)]
pub(super) struct OrphanWatch {
    /// Decided: said, a kernel span was handed, or orphans are not dropped.
    decided: bool,
}

impl OrphanWatch {
    /// A watch for a runtime that drops orphans (`dropping`), else one
    /// decided from the start.
    pub(super) fn new(dropping: bool) -> Self {
        OrphanWatch { decided: !dropping }
    }

    /// `Some(orphans)` the one time it should be said: calls were dropped
    /// as orphans and no kernel span was handed so far. `orphans` (the
    /// kernel's count, `None` when it cannot be read now) is read only
    /// while undecided; once a span was handed, nothing is read again.
    pub(super) fn check(
        &mut self,
        spans: u64,
        orphans: impl FnOnce() -> Option<u64>,
    ) -> Option<u64> {
        if self.decided {
            return None;
        }
        if spans > 0 {
            self.decided = true;
            return None;
        }
        let orphans = orphans().filter(|&n| n > 0)?;
        self.decided = true;
        Some(orphans)
    }
}

/// Says it.
pub(super) fn warn(orphans: u64) {
    crate::diagnostics::warn_user!(
        orphans,
        "kspan dropped kernel calls made with no application span active on their thread, \
         and has exported no kernel span: with `Orphans::Drop` (the default) a kernel span \
         needs an application span to hang under. Make the calls inside one (`tracer.in_span`, \
         or a `tracing` span through tracing-opentelemetry: kspan's context observer publishes \
         it to the kernel), or export them as traces of their own with \
         `.orphans(kspan::Orphans::NewTrace)` on `Kspan::builder`; `Stats::orphans_dropped` \
         counts them"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn said_once_when_orphans_were_dropped_and_no_span_was_handed() {
        let mut watch = OrphanWatch::new(true);
        assert_eq!(watch.check(0, || Some(0)), None, "nothing dropped yet");
        assert_eq!(watch.check(0, || None), None, "counters unreadable now");
        assert_eq!(watch.check(0, || Some(7)), Some(7));
        assert_eq!(watch.check(0, || Some(9)), None, "once");
        assert_eq!(watch.check(3, || Some(9)), None);
    }

    #[test]
    fn never_said_once_a_span_was_handed() {
        let mut watch = OrphanWatch::new(true);
        assert_eq!(watch.check(0, || Some(0)), None);
        assert_eq!(
            watch.check(1, || panic!("not read once a span was handed")),
            None
        );
        assert_eq!(
            watch.check(0, || panic!("not read after deciding")),
            None,
            "decided for good"
        );
    }

    #[test]
    fn never_said_nor_read_when_orphans_are_not_dropped() {
        let mut watch = OrphanWatch::new(false);
        assert_eq!(watch.check(0, || panic!("not read")), None);
    }
}
