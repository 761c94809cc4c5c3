// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Block devices by the kernel's own device number (`dev_t` inside the
//! kernel: major << 20 | minor, what kspan's block programs read): their
//! names, from `/sys/dev/block/<major>:<minor>/uevent`, read once each.

use std::collections::HashMap;
use std::sync::Mutex;

/// The minor number's bits in the kernel's `dev_t` (`MINORBITS`).
const MINOR_BITS: u64 = 20;

static NAMES: Mutex<Option<HashMap<u64, String>>> = Mutex::new(None);

/// The name of block device `dev` (`vda`, `nvme0n1p2`), or `major:minor`
/// where sysfs does not say.
pub(crate) fn device_name(dev: u64) -> String {
    let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    names
        .get_or_insert_with(HashMap::new)
        .entry(dev)
        .or_insert_with(|| {
            let (major, minor) = split(dev);
            std::fs::read_to_string(format!("/sys/dev/block/{major}:{minor}/uevent"))
                .ok()
                .and_then(|text| devname(&text))
                .unwrap_or_else(|| format!("{major}:{minor}"))
        })
        .clone()
}

/// `dev`'s major and minor numbers.
fn split(dev: u64) -> (u64, u64) {
    (dev >> MINOR_BITS, dev & ((1 << MINOR_BITS) - 1))
}

/// `DEVNAME=` of a device's `uevent` text.
pub(crate) fn devname(uevent: &str) -> Option<String> {
    uevent
        .lines()
        .find_map(|line| line.strip_prefix("DEVNAME="))
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_s_device_numbers_split_as_its_macros_do() {
        assert_eq!(split((253 << 20) | 16), (253, 16));
        assert_eq!(
            devname("MAJOR=253\nMINOR=0\nDEVNAME=vda\nDEVTYPE=disk\n").as_deref(),
            Some("vda")
        );
        assert_eq!(devname("MAJOR=1\n"), None);
        // No such device: its numbers.
        assert_eq!(device_name((4000 << 20) | 7), "4000:7");
    }
}
