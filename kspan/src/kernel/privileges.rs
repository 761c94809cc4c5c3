// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The capability check done before anything is loaded.
//!
//! Without it, the first symptom of missing privileges is an EPERM from
//! `bpf(2)` that looks exactly like a kernel refusing trampolines; checking
//! `CapEff` first tells the two apart.

pub(crate) const CAP_SYS_ADMIN: u32 = 21;
pub(crate) const CAP_PERFMON: u32 = 38;
pub(crate) const CAP_BPF: u32 = 39;

/// Whether the effective set `cap_eff` allows loading tracing programs;
/// `Err` carries the relevant capabilities held, for the message.
pub(crate) fn check_tracing_caps(cap_eff: u64) -> Result<(), String> {
    let has = |cap: u32| cap_eff & (1u64 << cap) != 0;
    if has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON)) {
        return Ok(());
    }
    let held: Vec<&str> = [(CAP_BPF, "CAP_BPF"), (CAP_PERFMON, "CAP_PERFMON")]
        .into_iter()
        .filter(|(c, _)| has(*c))
        .map(|(_, n)| n)
        .collect();
    Err(if held.is_empty() {
        "none of them".to_owned()
    } else {
        format!("only {}", held.join(" and "))
    })
}

/// Reads `CapEff` from `/proc/self/status` text.
pub(crate) fn parse_cap_eff(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
}

/// This process's effective capabilities; all assumed present when they cannot
/// be read (the kernel will then say no itself, with its errno).
pub(crate) fn effective() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| parse_cap_eff(&s))
        .unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_checks() {
        let status = "Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\n";
        let eff = parse_cap_eff(status).unwrap();
        assert!(check_tracing_caps(eff).is_ok());
        assert_eq!(check_tracing_caps(0).unwrap_err(), "none of them");
        assert_eq!(
            check_tracing_caps(1 << CAP_BPF).unwrap_err(),
            "only CAP_BPF"
        );
        assert!(check_tracing_caps((1 << CAP_BPF) | (1 << CAP_PERFMON)).is_ok());
        assert!(check_tracing_caps(1 << CAP_SYS_ADMIN).is_ok());
        assert_eq!(parse_cap_eff("Name: x\n"), None);
    }
}
