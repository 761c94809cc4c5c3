// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The kernel's functions by name: an open-addressed hash table over the
//! BTF string section, each slot a function's name offset and `FUNC` id.
//!
//! A kernel describes some 60,000 functions. Planning looks a few hundred
//! up by name and matches patterns against all of them; both read names
//! where they lie in the blob, so nothing is copied or allocated per name,
//! and a pattern's literal start is compared before a name's end is found.

/// Function names to `FUNC` ids, first id of a name kept (the kernel's own
/// lookup finds the first too).
pub(super) struct FunctionTable {
    /// `name offset << 32 | id`; 0 is an empty slot (id 0 is `void`,
    /// never a function). A power of two at least twice the names.
    slots: Vec<u64>,
    /// The high half of each slot's name hash: most names that share a
    /// slot are told apart without reading them.
    tags: Vec<u32>,
    /// Each distinct name's offset, in the order of the types: read in
    /// that order, the string section is read front to back.
    names: Vec<u32>,
}

/// FNV-1a over a name up to its NUL (or the end of `bytes`), and the
/// name's length. Names come from the kernel, not from an adversary: no
/// need for SipHash's cost.
fn hash_name(bytes: &[u8]) -> (u64, usize) {
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut len = 0;
    for &b in bytes {
        if b == 0 {
            break;
        }
        hash = (hash ^ u64::from(b)).wrapping_mul(PRIME);
        len += 1;
    }
    // The high bits mixed down: a slot is taken from the low ones.
    (hash ^ (hash >> 29), len)
}

/// Whether the NUL-terminated string at `offset` of `strings` is `name`.
fn is_name_at(strings: &[u8], offset: usize, name: &[u8]) -> bool {
    strings.get(offset..offset + name.len()) == Some(name)
        && strings.get(offset + name.len()).is_none_or(|&b| b == 0)
}

impl FunctionTable {
    /// The table of `funcs`: each a `FUNC` id and its name's offset in
    /// `strings`.
    pub(super) fn build(strings: &[u8], funcs: &[(u32, u32)]) -> Self {
        let slots_len = (funcs.len() * 2).next_power_of_two().max(2);
        let mask = slots_len - 1;
        let mut slots = vec![0u64; slots_len];
        let mut tags = vec![0u32; slots_len];
        let mut names = Vec::with_capacity(funcs.len());
        for &(id, name) in funcs {
            let tail = strings.get(name as usize..).unwrap_or_default();
            let (hash, len) = hash_name(tail);
            let tag = (hash >> 32) as u32;
            let mut slot = hash as usize & mask;
            loop {
                let entry = slots[slot];
                if entry == 0 {
                    slots[slot] = u64::from(name) << 32 | u64::from(id);
                    tags[slot] = tag;
                    names.push(name);
                    break;
                }
                if tags[slot] == tag && is_name_at(strings, (entry >> 32) as usize, &tail[..len]) {
                    break;
                }
                slot = (slot + 1) & mask;
            }
        }
        Self { slots, tags, names }
    }

    /// Number of distinct names.
    pub(super) fn len(&self) -> usize {
        self.names.len()
    }

    /// The `FUNC` id of `name`.
    pub(super) fn find(&self, strings: &[u8], name: &[u8]) -> Option<u32> {
        let mask = self.slots.len().checked_sub(1)?;
        let (hash, len) = hash_name(name);
        if len != name.len() {
            return None;
        }
        let tag = (hash >> 32) as u32;
        let mut slot = hash as usize & mask;
        loop {
            let entry = *self.slots.get(slot)?;
            if entry == 0 {
                return None;
            }
            if self.tags.get(slot) == Some(&tag)
                && is_name_at(strings, (entry >> 32) as usize, name)
            {
                return Some(entry as u32);
            }
            slot = (slot + 1) & mask;
        }
    }

    /// The name offset of every distinct function name, in the order of
    /// the types.
    pub(super) fn names(&self) -> impl Iterator<Item = u32> + '_ {
        self.names.iter().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A string section of `names`, each NUL-terminated, after an empty
    /// name at offset 0 as in BTF; with each name's offset.
    fn section(names: &[&str]) -> (Vec<u8>, Vec<u32>) {
        let mut strings = vec![0u8];
        let mut offsets = Vec::new();
        for name in names {
            offsets.push(strings.len() as u32);
            strings.extend_from_slice(name.as_bytes());
            strings.push(0);
        }
        (strings, offsets)
    }

    #[test]
    fn finds_every_name_and_only_those() {
        let names: Vec<String> = (0..1000).map(|i| format!("fn_{i}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let (strings, offsets) = section(&refs);
        let funcs: Vec<(u32, u32)> = offsets
            .iter()
            .enumerate()
            .map(|(i, &o)| (i as u32 + 1, o))
            .collect();
        let table = FunctionTable::build(&strings, &funcs);
        assert_eq!(table.len(), 1000);
        for (i, name) in refs.iter().enumerate() {
            assert_eq!(
                table.find(&strings, name.as_bytes()),
                Some(i as u32 + 1),
                "{name}"
            );
        }
        // Prefixes and extensions of names, and a name with a NUL inside.
        for absent in ["fn_", "fn_1000", "fn_99x", "", "fn_1\0"] {
            assert_eq!(table.find(&strings, absent.as_bytes()), None, "{absent:?}");
        }
        assert_eq!(table.names().collect::<Vec<_>>(), offsets);
    }

    #[test]
    fn the_first_function_of_a_name_wins() {
        let (strings, offsets) = section(&["dup", "other", "dup"]);
        let funcs = [(7, offsets[0]), (8, offsets[1]), (9, offsets[2])];
        let table = FunctionTable::build(&strings, &funcs);
        assert_eq!(table.len(), 2);
        assert_eq!(table.find(&strings, b"dup"), Some(7));
        assert_eq!(table.names().count(), 2);
    }

    #[test]
    fn names_past_the_section_do_not_panic() {
        let (strings, _) = section(&["a"]);
        let table = FunctionTable::build(&strings, &[(1, 999), (2, 1)]);
        assert_eq!(table.find(&strings, b"a"), Some(2));
        assert_eq!(FunctionTable::build(&[], &[]).find(&[], b"a"), None);
        assert_eq!(FunctionTable::build(&[], &[]).names().count(), 0);
    }
}
