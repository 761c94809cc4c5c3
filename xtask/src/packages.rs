//! A Debian `Packages` index (what `apt-cache dumpavail` prints) and the
//! dependency closure of a package in it, for unpacking a program of another
//! suite with its libraries (`dpkg -x`) instead of installing it.
//!
//! apt itself cannot answer this without installing: `apt-get install
//! --download-only` resolves against the machine's installed packages, and
//! `apt-cache depends --recurse` lists every alternative and every provider
//! of a virtual package, not one choice. So the closure is computed here:
//! `Depends` and `Pre-Depends`, the first satisfiable alternative of each
//! group (or one already chosen), versions checked the way dpkg compares
//! them.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use anyhow::{bail, Result};

/// One package of the index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Package {
    pub name: String,
    pub version: String,
    /// `Pre-Depends` and `Depends`: every group must hold, one alternative
    /// of a group is enough.
    pub depends: Vec<Vec<Dep>>,
    /// Virtual packages it provides, with their version when it gives one.
    pub provides: Vec<(String, Option<String>)>,
    /// `Essential: yes`: dpkg, coreutils, bash and the like, which every
    /// Debian system has.
    pub essential: bool,
}

/// One alternative of a dependency: a package name and, maybe, a version
/// relation (`>=`, `=`, ...) with a version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dep {
    pub name: String,
    pub relation: Option<(String, String)>,
}

impl std::fmt::Display for Dep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.relation {
            Some((op, v)) => write!(f, "{} ({op} {v})", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// Parses a `Depends`-style field: `a (>= 1), b | c:any, d (<< 2) [amd64]`.
/// Architecture qualifiers (`:any`, `:amd64`) are dropped: the index is of
/// one architecture.
pub fn parse_deps(field: &str) -> Vec<Vec<Dep>> {
    field
        .split(',')
        .map(str::trim)
        .filter(|g| !g.is_empty())
        .map(|group| {
            group
                .split('|')
                .filter_map(|alt| {
                    let alt = alt.trim();
                    // The name ends at a qualifier, a relation, or an
                    // architecture list or build profile (source packages).
                    let end = alt.find([':', '(', '[', '<', ' ']).unwrap_or(alt.len());
                    let name = &alt[..end];
                    if name.is_empty() {
                        return None;
                    }
                    let rest = alt[end..]
                        .trim_start_matches(|c: char| c != '(' && c != '[' && c != '<')
                        .strip_prefix('(');
                    let relation = rest.and_then(|r| {
                        let r = r.split(')').next().unwrap_or(r).trim();
                        let op_len = r.find(|c: char| !"<>=".contains(c)).unwrap_or(r.len());
                        let (op, version) = r.split_at(op_len);
                        let version = version.trim();
                        (!version.is_empty()).then(|| {
                            (
                                if op.is_empty() { "=" } else { op }.to_string(),
                                version.to_string(),
                            )
                        })
                    });
                    Some(Dep {
                        name: name.to_string(),
                        relation,
                    })
                })
                .collect::<Vec<Dep>>()
        })
        .filter(|g| !g.is_empty())
        .collect()
}

/// The packages of a `Packages` index, by name; where a name appears more
/// than once, its highest version.
pub fn parse_index(text: &str) -> BTreeMap<String, Package> {
    let mut index: BTreeMap<String, Package> = BTreeMap::new();
    for stanza in text.split("\n\n") {
        let mut fields: BTreeMap<&str, String> = BTreeMap::new();
        let mut last: Option<&str> = None;
        for line in stanza.lines() {
            if line.starts_with([' ', '\t']) {
                // A continuation line (descriptions): nothing read here spans lines.
                if let Some(f) = last.and_then(|l| fields.get_mut(l)) {
                    f.push(' ');
                    f.push_str(line.trim());
                }
            } else if let Some((k, v)) = line.split_once(':') {
                fields.insert(k, v.trim().to_string());
                last = Some(k);
            }
        }
        let (Some(name), Some(version)) = (fields.get("Package"), fields.get("Version")) else {
            continue;
        };
        let mut depends = parse_deps(fields.get("Pre-Depends").map_or("", |s| s));
        depends.extend(parse_deps(fields.get("Depends").map_or("", |s| s)));
        let provides = parse_deps(fields.get("Provides").map_or("", |s| s))
            .into_iter()
            .flatten()
            .map(|d| (d.name, d.relation.map(|(_, v)| v)))
            .collect();
        let package = Package {
            name: name.clone(),
            version: version.clone(),
            depends,
            provides,
            essential: fields.get("Essential").is_some_and(|e| e == "yes"),
        };
        match index.get(name) {
            Some(known) if compare_versions(&known.version, version) != Ordering::Less => {}
            _ => {
                index.insert(name.clone(), package);
            }
        }
    }
    index
}

/// dpkg's order of version strings: epoch, then upstream version, then
/// Debian revision, each compared as dpkg does (`~` before anything, even
/// the end; letters before other characters; digit runs as numbers).
pub fn compare_versions(a: &str, b: &str) -> Ordering {
    fn split(v: &str) -> (u64, &str, &str) {
        let (epoch, rest) = match v.split_once(':') {
            Some((e, r)) if e.bytes().all(|c| c.is_ascii_digit()) => (e.parse().unwrap_or(0), r),
            _ => (0, v),
        };
        let (upstream, revision) = rest.rsplit_once('-').unwrap_or((rest, ""));
        (epoch, upstream, revision)
    }
    fn order(c: Option<u8>) -> i32 {
        match c {
            None => 0,
            Some(c) if c.is_ascii_digit() => 0,
            Some(c) if c.is_ascii_alphabetic() => i32::from(c),
            Some(b'~') => -1,
            Some(c) => i32::from(c) + 256,
        }
    }
    fn part(a: &[u8], b: &[u8]) -> Ordering {
        let (mut i, mut j) = (0, 0);
        let digit = |s: &[u8], k: usize| s.get(k).is_some_and(u8::is_ascii_digit);
        while i < a.len() || j < b.len() {
            while (i < a.len() && !digit(a, i)) || (j < b.len() && !digit(b, j)) {
                let (x, y) = (order(a.get(i).copied()), order(b.get(j).copied()));
                if x != y {
                    return x.cmp(&y);
                }
                i += 1;
                j += 1;
            }
            while a.get(i) == Some(&b'0') {
                i += 1;
            }
            while b.get(j) == Some(&b'0') {
                j += 1;
            }
            let mut first_diff = Ordering::Equal;
            while digit(a, i) && digit(b, j) {
                if first_diff == Ordering::Equal {
                    first_diff = a[i].cmp(&b[j]);
                }
                i += 1;
                j += 1;
            }
            if digit(a, i) {
                return Ordering::Greater;
            }
            if digit(b, j) {
                return Ordering::Less;
            }
            if first_diff != Ordering::Equal {
                return first_diff;
            }
        }
        Ordering::Equal
    }
    let (ea, ua, ra) = split(a);
    let (eb, ub, rb) = split(b);
    ea.cmp(&eb)
        .then_with(|| part(ua.as_bytes(), ub.as_bytes()))
        .then_with(|| part(ra.as_bytes(), rb.as_bytes()))
}

/// Whether `version` satisfies `relation` (none: any version does).
fn satisfies(version: Option<&str>, relation: Option<&(String, String)>) -> bool {
    let Some((op, wanted)) = relation else {
        return true;
    };
    // An unversioned Provides satisfies no versioned dependency.
    let Some(version) = version else {
        return false;
    };
    let o = compare_versions(version, wanted);
    match op.as_str() {
        "<<" | "<" => o == Ordering::Less,
        "<=" => o != Ordering::Greater,
        "=" => o == Ordering::Equal,
        ">=" => o != Ordering::Less,
        ">>" | ">" => o == Ordering::Greater,
        _ => false,
    }
}

/// The package that satisfies `dep`: the package of that name (at a fitting
/// version), else the first provider of that name, by name.
fn candidate<'a>(index: &'a BTreeMap<String, Package>, dep: &Dep) -> Option<&'a Package> {
    index
        .get(&dep.name)
        .filter(|p| satisfies(Some(&p.version), dep.relation.as_ref()))
        .or_else(|| {
            index.values().find(|p| {
                p.provides
                    .iter()
                    .any(|(n, v)| *n == dep.name && satisfies(v.as_deref(), dep.relation.as_ref()))
            })
        })
}

/// What to unpack to run `root` of `index`.
#[derive(Debug, PartialEq, Eq)]
pub struct Closure {
    /// `(name, version)`, by name: `root` and what it needs.
    pub packages: Vec<(String, String)>,
    /// Essential packages it depends on, left out: every Debian system has
    /// them, and they are programs (shells, dpkg, coreutils), not libraries
    /// a program of the closure loads; their own dependencies are not
    /// followed.
    pub essential: Vec<String>,
}

/// The dependency closure of `root`: each dependency group is satisfied by
/// a package already chosen when one fits, else by the first alternative
/// that some package of the index satisfies (that package itself, else its
/// first provider by name). Fails naming the dependency when none does.
pub fn closure(index: &BTreeMap<String, Package>, root: &str) -> Result<Closure> {
    let Some(first) = index.get(root) else {
        bail!("the package index has no package `{root}`");
    };
    let mut chosen: BTreeMap<&str, &Package> = BTreeMap::from([(root, first)]);
    let mut essential = BTreeSet::new();
    let mut queue = VecDeque::from([first]);
    while let Some(pkg) = queue.pop_front() {
        for group in &pkg.depends {
            let holds = |p: &Package| {
                group.iter().any(|d| {
                    (p.name == d.name && satisfies(Some(&p.version), d.relation.as_ref()))
                        || p.provides.iter().any(|(n, v)| {
                            *n == d.name && satisfies(v.as_deref(), d.relation.as_ref())
                        })
                })
            };
            if chosen.values().any(|p| holds(p))
                || essential
                    .iter()
                    .any(|e: &&str| index.get(*e).is_some_and(holds))
            {
                continue;
            }
            let Some(next) = group.iter().find_map(|d| candidate(index, d)) else {
                let wanted: Vec<String> = group.iter().map(Dep::to_string).collect();
                bail!(
                    "{} {} depends on `{}`, which no package of the index satisfies \
                     (a suite in transition: try again once the archive has caught up, \
                     or report it to Debian)",
                    pkg.name,
                    pkg.version,
                    wanted.join(" | ")
                );
            };
            if next.essential {
                essential.insert(next.name.as_str());
            } else {
                chosen.insert(&next.name, next);
                queue.push_back(next);
            }
        }
    }
    Ok(Closure {
        packages: chosen
            .values()
            .map(|p| (p.name.clone(), p.version.clone()))
            .collect(),
        essential: essential.into_iter().map(str::to_string).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        use Ordering::*;
        for (a, b, o) in [
            ("1.0", "1.0", Equal),
            ("1.0", "1.0-0", Equal),
            ("1.0-1", "1.0-2", Less),
            ("1.10", "1.9", Greater),
            ("1.0~rc1", "1.0", Less),
            ("1.0~~", "1.0~", Less),
            ("1.0a", "1.0", Greater),
            ("1.0+b1", "1.0a", Greater),
            ("1:1.0", "2.0", Greater),
            ("1:21.1.8-14", "1:21.1.0", Greater),
            ("0.37.0+ds-8", "0.37.0+ds", Greater),
            ("2.43-7", "2.38", Greater),
            ("1:1.3.dfsg+really1.3.2-4", "1:1.2.11.dfsg", Greater),
            ("5.8.4-1", "5.1.1alpha+20120614", Greater),
            ("1.2-3-4", "1.2-3-5", Less),
            ("007", "7", Equal),
        ] {
            assert_eq!(compare_versions(a, b), o, "{a} vs {b}");
            assert_eq!(compare_versions(b, a), o.reverse(), "{b} vs {a}");
        }
    }

    #[test]
    fn dependency_fields() {
        assert_eq!(
            parse_deps(
                "libc6 (>= 2.38), libfoo | libbar (<< 2~), python3:any (>= 3.9), \
                 x (=1) [amd64]"
            ),
            vec![
                vec![Dep {
                    name: "libc6".into(),
                    relation: Some((">=".into(), "2.38".into()))
                }],
                vec![
                    Dep {
                        name: "libfoo".into(),
                        relation: None
                    },
                    Dep {
                        name: "libbar".into(),
                        relation: Some(("<<".into(), "2~".into()))
                    }
                ],
                vec![Dep {
                    name: "python3".into(),
                    relation: Some((">=".into(), "3.9".into()))
                }],
                vec![Dep {
                    name: "x".into(),
                    relation: Some(("=".into(), "1".into()))
                }],
            ]
        );
        assert!(parse_deps("").is_empty());
        assert_eq!(
            parse_deps("debhelper-compat (= 13), dh-python <!nopython>"),
            parse_deps("debhelper-compat (= 13), dh-python")
        );
    }

    /// Stanzas of sid's index on 2026-12-01 (`apt-cache dumpavail`): the
    /// packages of bpftrace's closure and bash (essential), other fields
    /// than those read here left out but for bpftrace's.
    const SID: &str = "\
Package: bpftrace
Version: 0.27.1-1
Installed-Size: 15305
Maintainer: Vincent Bernat <bernat@debian.org>
Architecture: amd64
Depends: libbpfcc (>= 0.37.0+ds), libc6 (>= 2.38), libclang-cpp21 (>= 1:21.1.8), libclang1-21 (>= 1:15.0.7), libdw1t64 (>= 0.171), libelf1t64 (>= 0.144), libgcc-s1 (>= 3.0), libllvm21 (>= 1:21.1.0), libsframe3 (>= 2.45.50), libstdc++6 (>= 16.2), libzstd1 (>= 1.5.5), zlib1g (>= 1:1.2.11.dfsg)
Recommends: libc6-dev
Description: high-level tracing language for Linux eBPF
 BPFtrace is a high-level tracing language for Linux enhanced Berkeley Packet
 Filter (eBPF) available in recent Linux kernels (4.x).
Filename: pool/main/b/bpftrace/bpftrace_0.27.1-1_amd64.deb

Package: gcc-16-base
Version: 16.2.0-4

Package: libbpf1
Version: 1:1.7.0-1
Depends: libc6 (>= 2.38), libelf1t64 (>= 0.144), zlib1g (>= 1:1.2.3.4)

Package: libbpfcc
Version: 0.37.0+ds-8
Depends: libbpf1 (>= 1:1.2.0), libc6 (>= 2.38), libclang-cpp21 (>= 1:21.1.8), libelf1t64 (>= 0.144), libgcc-s1 (>= 3.0), libllvm21 (>= 1:21.1.0), liblzma5 (>= 5.1.1alpha+20120614), libstdc++6 (>= 13.1)

Package: libbsd0
Version: 0.12.2-3
Depends: libc6 (>= 2.38), libmd0 (>= 1.0.3-2)

Package: libbz2-1.0
Version: 1.0.8-6+b2
Depends: libc6 (>= 2.4)

Package: libc-gconv-modules-extra
Version: 2.43-7

Package: libc6
Version: 2.43-7
Depends: libgcc-s1, libc-gconv-modules-extra (= 2.43-7)

Package: libclang-cpp21
Version: 1:21.1.8-14
Depends: libc6 (>= 2.38), libgcc-s1 (>= 3.0), libllvm21 (= 1:21.1.8-14), libstdc++6 (>= 12)

Package: libclang1-21
Version: 1:21.1.8-14
Depends: libc6 (>= 2.38), libgcc-s1 (>= 3.0), libllvm21 (>= 1:21.1.0), libstdc++6 (>= 11)

Package: libdw1t64
Version: 0.196-1
Provides: libdw1 (= 0.196-1)
Depends: libbz2-1.0, libc6 (>= 2.38), libelf1t64 (= 0.196-1), liblzma5 (>= 5.1.1alpha+20120614), libzstd1 (>= 1.5.5), zlib1g (>= 1:1.2.2.3)

Package: libedit2
Version: 3.1-20260512-1
Depends: libbsd0 (>= 0.1.3), libc6 (>= 2.42), libtinfo6 (>= 6)

Package: libelf1t64
Version: 0.196-1
Provides: libelf1 (= 0.196-1)
Depends: libc6 (>= 2.38), libzstd1 (>= 1.5.5), zlib1g (>= 1:1.1.4)

Package: libffi8
Version: 3.8.0-2
Provides: libffi8ubuntu1 (= 3.8.0-2)
Depends: libc6 (>= 2.38)

Package: libgcc-s1
Version: 16.2.0-4
Provides: libgcc1 (= 1:16.2.0-4)
Depends: gcc-16-base (= 16.2.0-4), libc6 (>= 2.35)
Protected: yes

Package: libllvm21
Version: 1:21.1.8-14
Depends: libc6 (>= 2.38), libedit2 (>= 2.11-20080614-0), libffi8 (>= 3.4), libgcc-s1 (>= 4.3), libstdc++6 (>= 12), libxml2-16 (>= 2.14.1), libz3-4 (>= 4.13.3), libzstd1 (>= 1.5.5), zlib1g (>= 1:1.2.0)

Package: liblzma5
Version: 5.8.4-1
Depends: libc6 (>= 2.34)

Package: libmd0
Version: 1.3.0-1
Depends: libc6 (>= 2.33)

Package: libsframe3
Version: 2.47.50.20261021-1
Depends: libc6 (>= 2.14)

Package: libstdc++6
Version: 16.2.0-4
Depends: gcc-16-base (= 16.2.0-4), libc6 (>= 2.38), libgcc-s1 (>= 4.3)

Package: libtinfo6
Version: 6.6+20260608-2
Depends: libc6 (>= 2.42)

Package: libxml2-16
Version: 2.15.4+dfsg-1+b1
Depends: libc6 (>= 2.38), zlib1g (>= 1:1.2.2.3)

Package: libz3-4
Version: 4.13.3-1.1
Depends: libc6 (>= 2.38), libgcc-s1 (>= 3.4), libstdc++6 (>= 14)

Package: libzstd1
Version: 1.5.7+dfsg-4
Depends: libc6 (>= 2.34)

Package: zlib1g
Version: 1:1.3.dfsg+really1.3.2-4
Provides: libz1
Depends: libc6 (>= 2.14)

Package: bash
Version: 5.3-4
Essential: yes
Depends: base-files (>= 2.1.12), debianutils (>= 5.6-0.1)
Pre-Depends: libc6 (>= 2.38), libtinfo6 (>= 6)
";

    #[test]
    fn bpftrace_of_sid() {
        let index = parse_index(SID);
        let bpftrace = &index["bpftrace"];
        assert_eq!(bpftrace.version, "0.27.1-1");
        assert_eq!(bpftrace.depends.len(), 12);
        assert_eq!(
            index["libdw1t64"].provides,
            [("libdw1".to_string(), Some("0.196-1".to_string()))]
        );
        assert!(index["bash"].essential && !index["libc6"].essential);
        let c = closure(&index, "bpftrace").unwrap();
        let names: Vec<&str> = c.packages.iter().map(|(n, _)| n.as_str()).collect();
        // What `apt-cache depends --recurse bpftrace` names in sid, the
        // same 25 (each group has one alternative here).
        assert_eq!(
            names,
            [
                "bpftrace",
                "gcc-16-base",
                "libbpf1",
                "libbpfcc",
                "libbsd0",
                "libbz2-1.0",
                "libc-gconv-modules-extra",
                "libc6",
                "libclang-cpp21",
                "libclang1-21",
                "libdw1t64",
                "libedit2",
                "libelf1t64",
                "libffi8",
                "libgcc-s1",
                "libllvm21",
                "liblzma5",
                "libmd0",
                "libsframe3",
                "libstdc++6",
                "libtinfo6",
                "libxml2-16",
                "libz3-4",
                "libzstd1",
                "zlib1g",
            ]
        );
        assert!(c.packages.contains(&("libc6".into(), "2.43-7".into())));
        assert!(c.essential.is_empty());
    }

    #[test]
    fn alternatives_virtual_packages_and_essentials() {
        let index = parse_index(
            "Package: tool\nVersion: 1\n\
             Depends: libold (>= 2) | libnew, libz1, libdw1 (>= 0.190), bash, libx | libc6\n\n\
             Package: libold\nVersion: 1\n\n\
             Package: libnew\nVersion: 3\nDepends: libc6\n\n\
             Package: zlib1g\nVersion: 1:1.3\nProvides: libz1\n\n\
             Package: libdw1t64\nVersion: 0.196-1\nProvides: libdw1 (= 0.196-1)\n\n\
             Package: libdw1-old\nVersion: 0.150\nProvides: libdw1\n\n\
             Package: bash\nVersion: 5.3-2\nEssential: yes\nPre-Depends: libtinfo6\n\n\
             Package: libtinfo6\nVersion: 6\n\n\
             Package: libc6\nVersion: 2.43-7\n\n\
             Package: libc6\nVersion: 2.42-1\n",
        );
        // The higher of two stanzas of one package.
        assert_eq!(index["libc6"].version, "2.43-7");
        let c = closure(&index, "tool").unwrap();
        let names: Vec<&str> = c.packages.iter().map(|(n, _)| n.as_str()).collect();
        // libold is too old: libnew; libz1 is provided by zlib1g; a versioned
        // libdw1 only by the versioned Provides; `libx | libc6` is satisfied
        // by libc6, chosen already for libnew; bash is essential and left
        // out, its libtinfo6 not followed.
        assert_eq!(names, ["libc6", "libdw1t64", "libnew", "tool", "zlib1g"]);
        assert_eq!(c.essential, ["bash"]);
    }

    #[test]
    fn an_unsatisfiable_dependency_is_named() {
        let index = parse_index(
            "Package: bpftrace\nVersion: 0.28-1\nDepends: libc6 (>= 2.38), libllvm22 | libllvm23\n\n\
             Package: libc6\nVersion: 2.43-7\n",
        );
        let err = closure(&index, "bpftrace").unwrap_err().to_string();
        assert!(
            err.contains("bpftrace 0.28-1 depends on `libllvm22 | libllvm23`"),
            "{err}"
        );
        let err = closure(&index, "bpftool").unwrap_err().to_string();
        assert!(err.contains("no package `bpftool`"), "{err}");
    }
}
