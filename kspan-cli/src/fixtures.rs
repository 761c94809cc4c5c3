// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Hand-built kernel types and signatures, for the unit tests of the pure
//! code (C declarations, `gen`'s types and text).

use kspan::kernel::btf::{FuncSignature, KernelType, TypeClass};

/// An integer type of `bytes` width and signedness.
pub fn int(c_name: &str, bytes: u32, signed: bool) -> KernelType {
    ty(c_name, TypeClass::Int { bytes, signed })
}

/// A type of `class`, described in BTF (id 1).
pub fn ty(c_name: &str, class: TypeClass) -> KernelType {
    KernelType {
        c_name: c_name.to_owned(),
        class,
        id: 1,
        is_user_pointer: false,
        points_to_char: false,
    }
}

/// A pointer to anything but a one-byte integer.
pub fn ptr(c_name: &str) -> KernelType {
    ty(c_name, TypeClass::Pointer)
}

/// A pointer to a one-byte integer (`char *`, `u8 *`).
pub fn char_ptr(c_name: &str) -> KernelType {
    KernelType {
        points_to_char: true,
        ..ptr(c_name)
    }
}

/// [`char_ptr`], tagged `__user` in BTF.
pub fn user_char_ptr(c_name: &str) -> KernelType {
    KernelType {
        is_user_pointer: true,
        ..char_ptr(c_name)
    }
}

/// Function `name`'s signature.
pub fn sig(name: &str, ret: KernelType, params: &[(&str, KernelType)]) -> FuncSignature {
    FuncSignature {
        name: name.to_owned(),
        btf_id: 0,
        params: params
            .iter()
            .map(|(n, t)| ((*n).to_owned(), t.clone()))
            .collect(),
        ret,
    }
}

/// `vfs_read` as a kernel with `__user` tags describes it.
pub fn vfs_read() -> FuncSignature {
    sig(
        "vfs_read",
        int("ssize_t", 8, true),
        &[
            ("file", ptr("struct file *")),
            ("buf", user_char_ptr("char *")),
            ("count", int("size_t", 8, false)),
            ("pos", ptr("loff_t *")),
        ],
    )
}
