// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Which members of a parameter's struct `kspan gen` suggests as field-path
//! captures (`#[capture(path = "file->f_flags")] f_flags: u32`).
//!
//! Pure like [`handler`](super::handler): the questions are asked of a
//! [`Types`], which the kernel's [`Btf`] answers and tests answer from
//! hand-made type data.
//!
//! For a pointer to a struct, the suggestions are at most
//! [`MAX_SUGGESTIONS`]: a name-like string first, if one is near, then the
//! first members that read as a value (integers, enums, `bool`, fixed
//! arrays), in declaration order, members of unions left out (another
//! member may be what the union holds; a union that names one type in
//! several ways, as 6.x's `d_name` and `__d_name`, is not such a union).
//!
//! The string is a `char *` or `char` array member called `name` or `comm`,
//! in the struct itself, in the structs it embeds, or in those one pointer
//! away (`file->f_path.dentry->d_name.name`); one whose name ends in `name`
//! counts only in the struct itself and the structs it embeds (further
//! away it is rarely the object's). The nearest wins: the fewest pointers,
//! then an exact name, then the fewest members named `__...` (the kernel's
//! internal ones: 6.x's `dentry` has its name as `d_name` and, for
//! `fs/dcache.c` only, `__d_name`), then the fewest members, then the first
//! in declaration order. Pointers to `const` structs (operation tables), to
//! `struct module` (whose name is the module's), to the struct searched
//! from (list links, parents), to user memory, and pointers in a union are
//! not followed.

use std::collections::HashSet;

use kspan::kernel::btf::{Btf, Composite, KernelType, TypeClass};

use super::capture::field_type;

/// A member of a parameter's struct suggested as a field-path capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldCapture {
    /// The path from the parameter, as the DSL spells it
    /// (`file->f_path.dentry->d_name.name`).
    pub path: String,
    /// The last member's name, which names the capture unless taken.
    pub member: String,
    /// The member's type.
    pub ty: KernelType,
}

/// Suggestions per parameter, at most.
pub const MAX_SUGGESTIONS: usize = 3;

/// How many pointers the search for a name-like string follows.
const MAX_HOPS: usize = 1;

/// How deep embedded structs are searched, within one struct reached.
const MAX_EMBEDDED: usize = 3;

/// How many structs one search decodes, at most (a malformed or huge
/// BTF cannot make it long).
const MAX_STRUCTS: usize = 256;

/// What the suggestions need to know of the kernel's types.
pub trait Types {
    /// Type `id` as the capture checker sees it.
    fn kernel_type(&self, id: u32) -> KernelType;
    /// The struct or union `id` is (under typedefs and qualifiers), if its
    /// members are known.
    fn composite(&self, id: u32) -> Option<Composite>;
    /// What `id` points to, if it is a pointer.
    fn pointee(&self, id: u32) -> Option<u32>;
}

impl Types for Btf {
    fn kernel_type(&self, id: u32) -> KernelType {
        Btf::kernel_type(self, id)
    }
    fn composite(&self, id: u32) -> Option<Composite> {
        Btf::composite(self, id)
    }
    fn pointee(&self, id: u32) -> Option<u32> {
        Btf::pointee(self, id)
    }
}

/// A member reached from a struct, anonymous structs and unions looked
/// through: its name, type, whether a capture can read it in place (not a
/// bitfield, byte-aligned), and whether it shares its place with others in
/// a union (so that it may not be the one the memory holds).
struct Reached {
    name: String,
    type_id: u32,
    readable: bool,
    in_union: bool,
}

/// The named members of struct or union `c`, members of anonymous members
/// in their place, as the DSL finds them.
fn members(
    types: &impl Types,
    c: &Composite,
    depth: usize,
    in_union: bool,
    out: &mut Vec<Reached>,
) {
    let in_union = in_union || (c.is_union && !is_alias_union(types, c));
    for m in &c.members {
        if m.name.is_empty() {
            if depth < MAX_EMBEDDED {
                if let Some(inner) = types.composite(m.type_id) {
                    members(types, &inner, depth + 1, in_union, out);
                }
            }
            continue;
        }
        out.push(Reached {
            name: m.name.clone(),
            type_id: m.type_id,
            readable: m.bitfield_bits == 0 && m.bit_offset % 8 == 0,
            in_union,
        });
    }
}

/// Whether union `c` only names one type several ways (6.x's `dentry`
/// holds `const struct qstr d_name` and `struct qstr __d_name` in one):
/// whichever member is read, it is what the memory holds.
fn is_alias_union(types: &impl Types, c: &Composite) -> bool {
    let spelled = |id: u32| {
        let name = types.kernel_type(id).c_name;
        name.strip_prefix("const ")
            .map(str::to_owned)
            .unwrap_or(name)
    };
    let mut names = c.members.iter().map(|m| spelled(m.type_id));
    let first = names.next();
    names.all(|n| Some(&n) == first.as_ref())
}

/// The suggested field captures of parameter `param` of type `ty`: none
/// unless it is a kernel pointer to a struct or union with known members.
pub fn field_captures(types: &impl Types, param: &str, ty: &KernelType) -> Vec<FieldCapture> {
    if ty.class != TypeClass::Pointer || ty.is_user_pointer {
        return Vec::new();
    }
    let Some(target) = types.pointee(ty.id) else {
        return Vec::new();
    };
    let Some(composite) = types.composite(target) else {
        return Vec::new();
    };
    let mut out: Vec<FieldCapture> = Vec::new();
    if let Some(name) = name_string(types, param, target) {
        out.push(name);
    }
    let mut reached = Vec::new();
    members(types, &composite, 0, false, &mut reached);
    for m in reached {
        if out.len() >= MAX_SUGGESTIONS {
            break;
        }
        if !m.readable || m.in_union {
            continue;
        }
        let t = types.kernel_type(m.type_id);
        let path = format!("{param}->{}", m.name);
        // Values: pointers are addresses, and strings are the name's.
        let value = matches!(
            t.class,
            TypeClass::Int { .. }
                | TypeClass::Enum { .. }
                | TypeClass::Bool
                | TypeClass::Array { .. }
        );
        if value && field_type(&t).is_some() && out.iter().all(|f| f.path != path) {
            out.push(FieldCapture {
                path,
                member: m.name,
                ty: t,
            });
        }
    }
    out
}

/// How good a name `member` is for a name-like string: 0 for `name` and
/// `comm`, 1 for one ending in `name`, `None` for any other.
fn name_rank(member: &str) -> Option<u8> {
    if member == "name" || member == "comm" {
        Some(0)
    } else if member.ends_with("name") {
        Some(1)
    } else {
        None
    }
}

/// How many members of `path` are named `__...`: the kernel's convention
/// for internal ones (6.x's `dentry` has its name as `d_name` and, for
/// `fs/dcache.c` only, `__d_name`).
fn internal_members(path: &str) -> usize {
    path.split("->")
        .flat_map(|p| p.split('.'))
        .skip(1)
        .filter(|m| m.starts_with("__"))
        .count()
}

/// A string `&str` reads: a `char *` (of any one-byte integer) or a `char`
/// array member.
fn is_string(t: &KernelType) -> bool {
    match t.class {
        TypeClass::Pointer => t.points_to_char,
        TypeClass::Array { .. } => field_type(t) == Some("&str".to_owned()),
        _ => false,
    }
}

/// The struct a pointer of type `t` leads to, if the search follows it.
fn followed(types: &impl Types, t: &KernelType) -> Option<(u32, String)> {
    if t.class != TypeClass::Pointer || t.is_user_pointer {
        return None;
    }
    let target = types.pointee(t.id)?;
    let c_name = types.kernel_type(target).c_name;
    if c_name.starts_with("const ") || c_name.starts_with("volatile ") {
        return None;
    }
    let c = types.composite(target)?;
    (c.name != "module").then(|| (target, struct_key(&c)))
}

/// What identifies a struct for the search: its kind and tag (anonymous
/// structs are never reached through a pointer by name, and are not
/// deduplicated).
fn struct_key(c: &Composite) -> String {
    format!("{} {}", if c.is_union { "union" } else { "struct" }, c.name)
}

/// The name-like string nearest `start` (the struct parameter `param`
/// points to), as the module's documentation describes.
fn name_string(types: &impl Types, param: &str, start: u32) -> Option<FieldCapture> {
    struct Node {
        id: u32,
        /// The path up to the struct, ending in `->` or `.`.
        prefix: String,
        segments: usize,
        /// Embedded in a union's member (see [`Reached`]).
        in_union: bool,
    }
    let mut seen: HashSet<String> = HashSet::new();
    let mut decoded = 0usize;
    let mut level = vec![Node {
        id: start,
        prefix: format!("{param}->"),
        segments: 0,
        in_union: false,
    }];
    if let Some(c) = types.composite(start) {
        seen.insert(struct_key(&c));
    }
    for hop in 0..=MAX_HOPS {
        // The best string so far, by (rank, internal members, segments);
        // of equals, the first found.
        let mut best: Option<((u8, usize, usize), FieldCapture)> = None;
        let mut next: Vec<Node> = Vec::new();
        let mut stack: Vec<(Node, usize)> = level.into_iter().rev().map(|n| (n, 0)).collect();
        while let Some((node, embedded)) = stack.pop() {
            if decoded >= MAX_STRUCTS {
                break;
            }
            decoded += 1;
            let Some(c) = types.composite(node.id) else {
                continue;
            };
            let mut reached = Vec::new();
            members(types, &c, 0, node.in_union, &mut reached);
            let mut inner: Vec<(Node, usize)> = Vec::new();
            for m in reached {
                if !m.readable {
                    continue;
                }
                // A pointer in a union may be another member's bytes.
                let pointer_in_union = m.in_union;
                let segments = node.segments + 1;
                if segments > kspan::plan::fieldpath::MAX_SEGMENTS {
                    break;
                }
                let t = types.kernel_type(m.type_id);
                let path = format!("{}{}", node.prefix, m.name);
                if is_string(&t) {
                    if t.class == TypeClass::Pointer && pointer_in_union {
                        continue;
                    }
                    // A name ending in `name` is taken in the struct
                    // itself only: further away it is rarely the object's.
                    if let Some(rank) = name_rank(&m.name).filter(|&r| r == 0 || hop == 0) {
                        let rank = (rank, internal_members(&path), segments);
                        if best.as_ref().is_none_or(|(r, _)| rank < *r) {
                            best = Some((
                                rank,
                                FieldCapture {
                                    path,
                                    member: m.name,
                                    ty: t,
                                },
                            ));
                        }
                    }
                } else if t.class == TypeClass::Aggregate {
                    if embedded < MAX_EMBEDDED && types.composite(m.type_id).is_some() {
                        inner.push((
                            Node {
                                id: m.type_id,
                                prefix: format!("{path}."),
                                segments,
                                in_union: m.in_union,
                            },
                            embedded + 1,
                        ));
                    }
                } else if hop < MAX_HOPS && !pointer_in_union {
                    if let Some((target, key)) = followed(types, &t) {
                        if seen.insert(key) {
                            next.push(Node {
                                id: target,
                                prefix: format!("{path}->"),
                                segments,
                                in_union: false,
                            });
                        }
                    }
                }
            }
            // Embedded structs are searched where they are, before what
            // comes after them.
            stack.extend(inner.into_iter().rev());
        }
        if let Some((_, found)) = best {
            return Some(found);
        }
        level = next;
    }
    None
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::HashMap;

    use kspan::kernel::btf::Member;

    use super::*;

    /// Hand-made type data: each id's type, layout and pointee.
    #[derive(Default)]
    pub(crate) struct FakeTypes {
        types: HashMap<u32, (KernelType, Option<Composite>, Option<u32>)>,
        next: u32,
    }

    impl Types for FakeTypes {
        fn kernel_type(&self, id: u32) -> KernelType {
            self.types[&id].0.clone()
        }
        fn composite(&self, id: u32) -> Option<Composite> {
            self.types.get(&id).and_then(|t| t.1.clone())
        }
        fn pointee(&self, id: u32) -> Option<u32> {
            self.types.get(&id).and_then(|t| t.2)
        }
    }

    impl FakeTypes {
        fn add(&mut self, c_name: &str, class: TypeClass) -> u32 {
            self.next += 1;
            let t = KernelType {
                c_name: c_name.to_owned(),
                class,
                id: self.next,
                is_user_pointer: false,
                points_to_char: false,
            };
            self.types.insert(self.next, (t, None, None));
            self.next
        }
        pub(crate) fn int(&mut self, c_name: &str, bytes: u32, signed: bool) -> u32 {
            self.add(c_name, TypeClass::Int { bytes, signed })
        }
        pub(crate) fn ptr(&mut self, target: u32) -> u32 {
            let inner = self.kernel_type(target);
            let id = self.add(&format!("{} *", inner.c_name), TypeClass::Pointer);
            let entry = self.types.get_mut(&id).unwrap();
            entry.0.points_to_char = matches!(inner.class, TypeClass::Int { bytes: 1, .. });
            entry.2 = Some(target);
            id
        }
        pub(crate) fn user_ptr(&mut self, target: u32) -> u32 {
            let id = self.ptr(target);
            self.types.get_mut(&id).unwrap().0.is_user_pointer = true;
            id
        }
        pub(crate) fn array(&mut self, elem: u32, len: u32) -> u32 {
            let e = self.kernel_type(elem);
            let (elem_bytes, elem_is_char) = match e.class {
                TypeClass::Int { bytes, .. } => (bytes, bytes == 1),
                _ => (8, false),
            };
            self.add(
                &format!("{}[{len}]", e.c_name),
                TypeClass::Array {
                    elem_bytes,
                    len,
                    elem_is_char,
                },
            )
        }
        /// A struct (`c_name` "struct x") with members (name, type,
        /// bitfield bits); an empty name is an anonymous member.
        pub(crate) fn strukt(&mut self, c_name: &str, members: &[(&str, u32, u32)]) -> u32 {
            let id = self.add(c_name, TypeClass::Aggregate);
            let members = members
                .iter()
                .enumerate()
                .map(|(i, (name, type_id, bits))| Member {
                    name: (*name).to_owned(),
                    type_id: *type_id,
                    bit_offset: i as u32 * 64,
                    bitfield_bits: *bits,
                })
                .collect();
            let tag = c_name.rsplit(' ').next().unwrap_or_default();
            self.types.get_mut(&id).unwrap().1 = Some(Composite {
                name: if tag == "(anonymous)" {
                    String::new()
                } else {
                    tag.to_owned()
                },
                is_union: c_name.starts_with("union"),
                size: 64,
                members,
            });
            id
        }
        /// `const` over `id`: the same type, spelled `const ...`.
        pub(crate) fn konst(&mut self, id: u32) -> u32 {
            let (t, c, p) = self.types[&id].clone();
            self.next += 1;
            let t = KernelType {
                c_name: format!("const {}", t.c_name),
                id: self.next,
                ..t
            };
            self.types.insert(self.next, (t, c, p));
            self.next
        }
    }

    /// `struct file` and its neighbours, shaped as on 6.x.
    pub(crate) fn kernel() -> (FakeTypes, HashMap<&'static str, u32>) {
        let mut t = FakeTypes::default();
        let mut ids = HashMap::new();
        let char_ = t.int("char", 1, true);
        let uchar = t.int("unsigned char", 1, false);
        let cuchar = t.konst(uchar);
        let uint = t.int("unsigned int", 4, false);
        let u64_ = t.int("u64", 8, false);
        let cchar = t.konst(char_);
        let lock = t.strukt("struct spinlock", &[("raw", uint, 0)]);
        let module_name = t.array(char_, 56);
        let module = t.strukt("struct module", &[("name", module_name, 0)]);
        let module_ptr = t.ptr(module);
        let fops = t.strukt("struct file_operations", &[("owner", module_ptr, 0)]);
        let cfops = t.konst(fops);
        let fops_ptr = t.ptr(cfops);
        let name_ptr = t.ptr(cuchar);
        let qstr = t.strukt("struct qstr", &[("hash", uint, 0), ("name", name_ptr, 0)]);
        let cqstr = t.konst(qstr);
        // 6.18's order: the internal alias first.
        let names = t.strukt(
            "union (anonymous)",
            &[("__d_name", qstr, 0), ("d_name", cqstr, 0)],
        );
        let iname = t.array(uchar, 40);
        let dentry = t.strukt(
            "struct dentry",
            &[("d_flags", uint, 0), ("", names, 0), ("d_iname", iname, 0)],
        );
        let dentry_ptr = t.ptr(dentry);
        // A parent pointer to the same struct is not followed.
        if let Some(c) = t.types.get_mut(&dentry).and_then(|e| e.1.as_mut()) {
            c.members.insert(
                0,
                Member {
                    name: "d_parent".to_owned(),
                    type_id: dentry_ptr,
                    bit_offset: 0,
                    bitfield_bits: 0,
                },
            );
        }
        // An inode: a union of variants, whose pointers are not followed.
        let cchar0 = t.konst(char_);
        let kobj_name = t.ptr(cchar0);
        let kobject = t.strukt("struct kobject", &[("name", kobj_name, 0)]);
        let cdev = t.strukt("struct cdev", &[("kobj", kobject, 0)]);
        let cdev_ptr = t.ptr(cdev);
        let link = t.ptr(char_);
        let variants = t.strukt(
            "union (anonymous)",
            &[
                ("i_cdev", cdev_ptr, 0),
                ("i_link", link, 0),
                ("i_dir_seq", uint, 0),
            ],
        );
        let sysfs_name = t.array(char_, 37);
        let fs_name = t.ptr(cchar0);
        let fs_type = t.strukt("struct file_system_type", &[("name", fs_name, 0)]);
        let fs_type_ptr = t.ptr(fs_type);
        let sb = t.strukt(
            "struct super_block",
            &[("s_sysfs_name", sysfs_name, 0), ("s_type", fs_type_ptr, 0)],
        );
        let sb_ptr = t.ptr(sb);
        let u16_ = t.int("umode_t", 2, false);
        let inode = t.strukt(
            "struct inode",
            &[
                ("i_mode", u16_, 0),
                ("", variants, 0),
                ("i_sb", sb_ptr, 0),
                ("i_flags", uint, 0),
            ],
        );
        ids.insert("struct inode *", t.ptr(inode));
        let path = t.strukt("struct path", &[("dentry", dentry_ptr, 0)]);
        let cpath = t.konst(path);
        let anon = t.strukt(
            "union (anonymous)",
            &[("f_path", cpath, 0), ("__f_path", path, 0)],
        );
        let file = t.strukt(
            "struct file",
            &[
                ("f_lock", lock, 0),
                ("f_mode", uint, 0),
                ("f_op", fops_ptr, 0),
                ("f_bits", uint, 3),
                ("f_flags", uint, 0),
                ("", anon, 0),
                ("f_pos", u64_, 0),
            ],
        );
        ids.insert("struct file *", t.ptr(file));
        ids.insert("struct dentry *", dentry_ptr);
        ids.insert("const char *", t.ptr(cchar));
        let uname = t.user_ptr(cchar);
        let filename = t.strukt(
            "struct filename",
            &[
                ("name", t.types[&ids["const char *"]].0.id, 0),
                ("uptr", uname, 0),
                ("refcnt", uint, 0),
            ],
        );
        ids.insert("struct filename *", t.ptr(filename));
        let comm = t.array(char_, 16);
        let hw = t.array(uchar, 6);
        let big = t.array(u64_, 32);
        let task = t.strukt(
            "struct task_struct",
            &[
                ("__state", uint, 0),
                ("big", big, 0),
                ("hw", hw, 0),
                ("comm", comm, 0),
                ("pid", uint, 0),
            ],
        );
        ids.insert("struct task_struct *", t.ptr(task));
        let how = t.strukt(
            "struct open_how",
            &[("flags", u64_, 0), ("mode", u64_, 0), ("resolve", u64_, 0)],
        );
        ids.insert("struct open_how *", t.ptr(how));
        ids.insert("struct open_how __user *", t.user_ptr(how));
        let void = t.add("void", TypeClass::Void);
        ids.insert("void *", t.ptr(void));
        (t, ids)
    }

    fn paths(t: &FakeTypes, param: &str, id: u32) -> Vec<String> {
        field_captures(t, param, &t.kernel_type(id))
            .into_iter()
            .map(|f| format!("{} {}", f.path, field_type(&f.ty).unwrap()))
            .collect()
    }

    #[test]
    fn a_file_gets_its_name_and_first_scalars() {
        let (t, ids) = kernel();
        // f_op's owner is a module, and behind a `const` pointer; the
        // bitfield is skipped; `f_path` is found in the anonymous union.
        assert_eq!(
            paths(&t, "file", ids["struct file *"]),
            [
                "file->f_path.dentry->d_name.name &str",
                "file->f_mode u32",
                "file->f_flags u32",
            ]
        );
    }

    #[test]
    fn the_nearest_exact_name_wins() {
        let (t, ids) = kernel();
        // `d_name.name` over `__d_name.name` and `d_iname`; `d_parent` is
        // not followed.
        assert_eq!(
            paths(&t, "dentry", ids["struct dentry *"]),
            [
                "dentry->d_name.name &str",
                "dentry->d_flags u32",
                // `unsigned char`: bytes, as far as the type says.
                "dentry->d_iname [u8; 40]",
            ]
        );
        // A member of the struct itself; the user pointer is no value.
        assert_eq!(
            paths(&t, "name", ids["struct filename *"]),
            ["name->name &str", "name->refcnt u32"]
        );
    }

    #[test]
    fn variants_of_a_union_and_far_names_are_left_out() {
        let (t, ids) = kernel();
        // Not `i_cdev->kobj.name` (a union's variant), `i_link` (the same),
        // `i_sb->s_sysfs_name` (a name-ending name one pointer away) nor
        // `i_sb->s_type->name` (two pointers away); nor `i_dir_seq`.
        assert_eq!(
            paths(&t, "dir", ids["struct inode *"]),
            ["dir->i_mode u16", "dir->i_flags u32"]
        );
    }

    #[test]
    fn arrays_are_strings_or_bytes() {
        let (t, ids) = kernel();
        // 256 bytes is too many to suggest; `u8[6]` is bytes, `char[16]` a string.
        assert_eq!(
            paths(&t, "p", ids["struct task_struct *"]),
            ["p->comm &str", "p->__state u32", "p->hw [u8; 6]"]
        );
    }

    #[test]
    fn no_suggestions_without_a_kernel_struct() {
        let (t, ids) = kernel();
        assert_eq!(
            paths(&t, "how", ids["struct open_how *"]),
            ["how->flags u64", "how->mode u64", "how->resolve u64"]
        );
        assert!(paths(&t, "how", ids["struct open_how __user *"]).is_empty());
        assert!(paths(&t, "p", ids["void *"]).is_empty());
        assert!(paths(&t, "s", ids["const char *"]).is_empty());
    }
}
