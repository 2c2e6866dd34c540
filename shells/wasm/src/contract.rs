//! The contract description extracted from a component is core's contract
//! metadata type (`custos_core::release::contract`): exported interfaces,
//! each with its functions, every parameter and result a recursive
//! [`ValType`]. A function exported at the top level of the component is an
//! interface named after the function, holding that one function (core's
//! convention).
//!
//! This module adds what the Wasm shell needs on top: [`canonical_bytes`],
//! an unambiguous, deterministic encoding (tagged, length-prefixed), its
//! SHA-256 [`digest()`] (the contract part of a preparation stamp), and WIT-like
//! text ([`Wit`]) for messages.

pub use custos_core::release::contract::{
    Case, Contract, Field, Function, Interface, Param, Shape, ValType,
};
use custos_core::release::Sha256;

/// The canonical encoding: a version byte, then every interface in order
/// with its functions, each string length-prefixed (u32 LE) and each type
/// tagged. Two contracts are equal iff their encodings are.
pub fn canonical_bytes(contract: &Contract) -> Vec<u8> {
    let mut out = Vec::new();
    out.push(CANONICAL_VERSION);
    put_len(&mut out, contract.interfaces.len());
    for i in &contract.interfaces {
        put_str(&mut out, &i.name);
        put_functions(&mut out, &i.functions);
    }
    out
}

/// SHA-256 of [`canonical_bytes`].
pub fn digest(contract: &Contract) -> Sha256 {
    Sha256::of(&canonical_bytes(contract))
}

/// WIT-like text for a type or a function: `list<option<u32>>`,
/// `f: func(a: u32) -> string`.
#[derive(Clone, Copy, Debug)]
pub struct Wit<'a, T>(pub &'a T);

/// The version byte that starts [`canonical_bytes`].
pub const CANONICAL_VERSION: u8 = 1;

fn put_len(out: &mut Vec<u8>, n: usize) {
    // Every count here is bounded by wasmparser's limits (well below u32).
    let n = u32::try_from(n).unwrap_or(u32::MAX);
    out.extend_from_slice(&n.to_le_bytes());
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_len(out, s.len());
    out.extend_from_slice(s.as_bytes());
}

fn put_functions(out: &mut Vec<u8>, fs: &[Function]) {
    put_len(out, fs.len());
    for f in fs {
        put_str(out, &f.name);
        put_len(out, f.params.len());
        for p in &f.params {
            put_str(out, &p.name);
            put_type(out, &p.ty);
        }
        put_len(out, f.results.len());
        for r in &f.results {
            put_type(out, r);
        }
    }
}

fn put_opt(out: &mut Vec<u8>, t: Option<&ValType>) {
    match t {
        None => out.push(0),
        Some(t) => {
            out.push(1);
            put_type(out, t);
        }
    }
}

fn put_type(out: &mut Vec<u8>, t: &ValType) {
    match t {
        ValType::Bool => out.push(0x01),
        ValType::S8 => out.push(0x02),
        ValType::U8 => out.push(0x03),
        ValType::S16 => out.push(0x04),
        ValType::U16 => out.push(0x05),
        ValType::S32 => out.push(0x06),
        ValType::U32 => out.push(0x07),
        ValType::S64 => out.push(0x08),
        ValType::U64 => out.push(0x09),
        ValType::F32 => out.push(0x0a),
        ValType::F64 => out.push(0x0b),
        ValType::Char => out.push(0x0c),
        ValType::String => out.push(0x0d),
        ValType::List(e) => {
            out.push(0x10);
            put_type(out, e);
        }
        ValType::Record(fields) => {
            out.push(0x11);
            put_len(out, fields.len());
            for f in fields {
                put_str(out, &f.name);
                put_type(out, &f.ty);
            }
        }
        ValType::Tuple(ts) => {
            out.push(0x12);
            put_len(out, ts.len());
            for t in ts {
                put_type(out, t);
            }
        }
        ValType::Variant(cases) => {
            out.push(0x13);
            put_len(out, cases.len());
            for c in cases {
                put_str(out, &c.name);
                put_opt(out, c.ty.as_ref());
            }
        }
        ValType::Enum(names) => {
            out.push(0x14);
            put_names(out, names);
        }
        ValType::Option(t) => {
            out.push(0x15);
            put_type(out, t);
        }
        ValType::Result { ok, err } => {
            out.push(0x16);
            put_opt(out, ok.as_deref());
            put_opt(out, err.as_deref());
        }
        ValType::Flags(names) => {
            out.push(0x17);
            put_names(out, names);
        }
        ValType::Own(r) => {
            out.push(0x18);
            put_str(out, r);
        }
        ValType::Borrow(r) => {
            out.push(0x19);
            put_str(out, r);
        }
    }
}

fn put_names(out: &mut Vec<u8>, names: &[String]) {
    put_len(out, names.len());
    for n in names {
        put_str(out, n);
    }
}

impl std::fmt::Display for Wit<'_, ValType> {
    /// WIT-like text: `list<option<result<u32, string>>>`,
    /// `record { x: u32, y: s8 }`, `own<blob>`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            ValType::Bool => f.write_str("bool"),
            ValType::S8 => f.write_str("s8"),
            ValType::U8 => f.write_str("u8"),
            ValType::S16 => f.write_str("s16"),
            ValType::U16 => f.write_str("u16"),
            ValType::S32 => f.write_str("s32"),
            ValType::U32 => f.write_str("u32"),
            ValType::S64 => f.write_str("s64"),
            ValType::U64 => f.write_str("u64"),
            ValType::F32 => f.write_str("f32"),
            ValType::F64 => f.write_str("f64"),
            ValType::Char => f.write_str("char"),
            ValType::String => f.write_str("string"),
            ValType::List(t) => write!(f, "list<{}>", Wit(&**t)),
            ValType::Option(t) => write!(f, "option<{}>", Wit(&**t)),
            ValType::Record(fields) => {
                f.write_str("record { ")?;
                for (i, fld) in fields.iter().enumerate() {
                    let sep = if i == 0 { "" } else { ", " };
                    write!(f, "{sep}{}: {}", fld.name, Wit(&fld.ty))?;
                }
                f.write_str(" }")
            }
            ValType::Tuple(ts) => {
                f.write_str("tuple<")?;
                for (i, t) in ts.iter().enumerate() {
                    let sep = if i == 0 { "" } else { ", " };
                    write!(f, "{sep}{}", Wit(t))?;
                }
                f.write_str(">")
            }
            ValType::Variant(cases) => {
                f.write_str("variant { ")?;
                for (i, c) in cases.iter().enumerate() {
                    let sep = if i == 0 { "" } else { ", " };
                    match &c.ty {
                        Some(t) => write!(f, "{sep}{}({})", c.name, Wit(t))?,
                        None => write!(f, "{sep}{}", c.name)?,
                    }
                }
                f.write_str(" }")
            }
            ValType::Enum(names) => write!(f, "enum {{ {} }}", names.join(", ")),
            ValType::Flags(names) => write!(f, "flags {{ {} }}", names.join(", ")),
            ValType::Result { ok, err } => match (ok, err) {
                (None, None) => f.write_str("result"),
                (Some(o), None) => write!(f, "result<{}>", Wit(&**o)),
                (None, Some(e)) => write!(f, "result<_, {}>", Wit(&**e)),
                (Some(o), Some(e)) => write!(f, "result<{}, {}>", Wit(&**o), Wit(&**e)),
            },
            ValType::Own(r) => write!(f, "own<{r}>"),
            ValType::Borrow(r) => write!(f, "borrow<{r}>"),
        }
    }
}

impl std::fmt::Display for Wit<'_, Function> {
    /// `name: func(a: u32, b: string) -> bool`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let func = self.0;
        write!(f, "{}: func(", func.name)?;
        for (i, p) in func.params.iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            write!(f, "{sep}{}: {}", p.name, Wit(&p.ty))?;
        }
        f.write_str(")")?;
        match func.results.as_slice() {
            [] => Ok(()),
            [r] => write!(f, " -> {}", Wit(r)),
            rs => {
                f.write_str(" -> (")?;
                for (i, r) in rs.iter().enumerate() {
                    let sep = if i == 0 { "" } else { ", " };
                    write!(f, "{sep}{}", Wit(r))?;
                }
                f.write_str(")")
            }
        }
    }
}
