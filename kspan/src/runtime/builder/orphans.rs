// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Saying, once per runtime, that calls were dropped as orphans. With
//! `Orphans::Drop` (the default), a call made outside any application span
//! is not recorded: a program whose calls are all made so exports nothing,
//! and one that makes some inside spans and others outside loses sight of
//! the others, and only `Stats::orphans_dropped` would move. The consumer
//! checks on its tick (and once more at shutdown), never per record.

/// Whether the runtime is still to say it.
#[derive(Debug)]
pub(super) struct OrphanWatch {
    /// Decided: said, or orphans are not dropped.
    decided: bool,
}

/// What the warning says: the calls dropped so far, and whether any kernel
/// span was handed beside them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Dropped {
    /// Calls dropped as orphans when it was found.
    pub(super) orphans: u64,
    /// Kernel spans handed to the pipeline by then.
    pub(super) spans: u64,
}

impl OrphanWatch {
    /// A watch for a runtime that drops orphans (`dropping`), else one
    /// decided from the start.
    pub(super) fn new(dropping: bool) -> Self {
        OrphanWatch { decided: !dropping }
    }

    /// `Some` the one time it should be said: calls were dropped as
    /// orphans, whether or not kernel spans were handed (`spans`) beside
    /// them. `orphans` (the kernel's count, `None` when it cannot be read
    /// now) is read only while undecided.
    pub(super) fn check(
        &mut self,
        spans: u64,
        orphans: impl FnOnce() -> Option<u64>,
    ) -> Option<Dropped> {
        if self.decided {
            return None;
        }
        let orphans = orphans().filter(|&n| n > 0)?;
        self.decided = true;
        Some(Dropped { orphans, spans })
    }
}

/// The warning's text.
fn message(dropped: Dropped) -> String {
    let beside = if dropped.spans == 0 {
        "and has exported no kernel span".to_owned()
    } else {
        format!(
            "beside the {} kernel spans made inside application spans so far",
            dropped.spans
        )
    };
    format!(
        "kspan dropped {} kernel calls so far made with no application span active on their \
         thread, {beside}: with `Orphans::Drop` (the default) a kernel span needs an \
         application span to hang under. Make the calls inside one (`tracer.in_span`, or a \
         `tracing` span through tracing-opentelemetry: kspan's context observer publishes it \
         to the kernel), or export them as traces of their own with \
         `.orphans(kspan::Orphans::NewTrace)` on `Kspan::builder`. Housekeeping calls of no \
         interest need nothing. `Stats::orphans_dropped` counts them all (said once)",
        dropped.orphans
    )
}

/// Says it.
pub(super) fn warn(dropped: Dropped) {
    crate::diagnostics::warn_user!(orphans = dropped.orphans, "{}", message(dropped));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn said_once_when_orphans_were_dropped_and_no_span_was_handed() {
        let mut watch = OrphanWatch::new(true);
        assert_eq!(watch.check(0, || Some(0)), None, "nothing dropped yet");
        assert_eq!(watch.check(0, || None), None, "counters unreadable now");
        let said = watch.check(0, || Some(7)).expect("said");
        assert_eq!(
            said,
            Dropped {
                orphans: 7,
                spans: 0
            }
        );
        assert!(message(said).contains("dropped 7 kernel calls"));
        assert!(message(said).contains("has exported no kernel span"));
        assert_eq!(watch.check(0, || Some(9)), None, "once");
        assert_eq!(watch.check(3, || Some(9)), None);
    }

    #[test]
    fn said_once_when_orphans_were_dropped_beside_handed_spans() {
        // Spans handed before any orphan: nothing to say yet, and the
        // kernel's count is still read on later ticks.
        let mut watch = OrphanWatch::new(true);
        assert_eq!(watch.check(10, || Some(0)), None);
        let said = watch.check(10, || Some(100)).expect("said beside spans");
        assert_eq!(
            said,
            Dropped {
                orphans: 100,
                spans: 10
            }
        );
        let text = message(said);
        assert!(text.contains("dropped 100 kernel calls"), "{text}");
        assert!(text.contains("beside the 10 kernel spans"), "{text}");
        assert!(
            text.contains(".orphans(kspan::Orphans::NewTrace)"),
            "the fix: {text}"
        );
        assert_eq!(
            watch.check(10, || panic!("not read after deciding")),
            None,
            "decided for good"
        );
    }

    #[test]
    fn never_said_nor_read_when_orphans_are_not_dropped() {
        let mut watch = OrphanWatch::new(false);
        assert_eq!(watch.check(0, || panic!("not read")), None);
        assert_eq!(watch.check(5, || panic!("not read")), None);
    }
}
