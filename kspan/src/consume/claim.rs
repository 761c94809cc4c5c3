// SPDX-License-Identifier: Apache-2.0 OR MIT
//! One runtime records at a time in a process. Every runtime's programs
//! take every call the process makes (the thread context a call is made
//! under names a span, not the provider that made it), so a second runtime
//! would export each call again, under parents of the first one's
//! provider. The claim is held by the consumer, from before recording is
//! switched on until the consumer is gone, the links detached before it.

use std::panic::Location;
use std::sync::Mutex;

/// Who holds a process's claim: the caller of the `start` that took it.
pub(crate) struct Slot(Mutex<Option<&'static Location<'static>>>);

/// The process's slot.
pub(crate) static PROCESS: Slot = Slot::new();

impl Slot {
    const fn new() -> Self {
        Slot(Mutex::new(None))
    }

    /// Takes the slot for a runtime started at `by`; `Err` with where the
    /// runtime holding it was started.
    pub(crate) fn take(
        &'static self,
        by: &'static Location<'static>,
    ) -> Result<Claim, &'static Location<'static>> {
        let mut held = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match *held {
            Some(first) => Err(first),
            None => {
                *held = Some(by);
                Ok(Claim { slot: self })
            }
        }
    }
}

/// A runtime's claim on its process; dropping it lets another start.
pub(crate) struct Claim {
    slot: &'static Slot,
}

impl Drop for Claim {
    fn drop(&mut self) {
        *self.slot.0.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_is_held_until_its_claim_is_dropped() {
        static SLOT: Slot = Slot::new();
        let first = Location::caller();
        let claim = SLOT.take(first).expect("a free slot");
        let second = SLOT.take(Location::caller()).map(drop);
        assert_eq!(second, Err(first), "names the holder");
        drop(claim);
        let again = SLOT.take(Location::caller()).expect("free again");
        assert!(SLOT.take(first).is_err());
        drop(again);
        assert!(SLOT.take(first).is_ok());
    }
}
