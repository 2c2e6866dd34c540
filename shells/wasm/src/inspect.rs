//! Publication-time inspection: validate component bytes with `wasmparser`
//! (features pinned to the engine's, see [`engine_features`]) and extract the
//! exported [`Contract`]. Nothing here compiles or instantiates anything.
//!
//! The work is bounded: every parameter and result type is first *measured*
//! (depth with the root counting one, nodes summed over the whole contract,
//! shared types counted at every use) with an early stop at
//! [`MAX_TYPE_DEPTH`] / [`MAX_TYPE_NODES`](custos_core::release::bounds::MAX_TYPE_NODES);
//! only a contract that passed is then converted into [`ValType`]s.

use std::collections::HashMap;

use custos_core::release::bounds::{check_contract_shape, BoundError, MAX_TYPE_DEPTH};
use thiserror::Error;
use wasmparser::component_types::{
    AliasableResourceId, ComponentAnyTypeId, ComponentDefinedType, ComponentEntityType,
    ComponentFuncType, ComponentItem, ComponentValType, RecordType, ResourceId, VariantType,
};
use wasmparser::types::TypesRef;
use wasmparser::{Parser, Payload, PrimitiveValType, Validator, WasmFeatures};

use crate::contract::{Case, Contract, Field, Function, Interface, Param, ValType};

/// The wasm magic number every module and component starts with.
const WASM_MAGIC: [u8; 4] = *b"\0asm";

/// The features removed from `wasmparser`'s defaults so that validation
/// accepts what the preparation engine (wasmtime 48 with `cranelift` and
/// `component-model`, no `gc`, `threads` or `component-model-async`)
/// accepts: GC, GC types, shared memory, exception handling and the
/// component-model async ABI (futures, streams, error contexts, async
/// functions).
pub const REMOVED_FEATURES: WasmFeatures = WasmFeatures::GC
    .union(WasmFeatures::GC_TYPES)
    .union(WasmFeatures::THREADS)
    .union(WasmFeatures::EXCEPTIONS)
    .union(WasmFeatures::CM_ASYNC);

/// The validation features: `wasmparser`'s defaults less
/// [`REMOVED_FEATURES`].
pub fn engine_features() -> WasmFeatures {
    WasmFeatures::default().difference(REMOVED_FEATURES)
}

/// Why component bytes were refused at publication. Every variant is a
/// validation failure of the publication; nothing was compiled, instantiated
/// or written.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum InspectError {
    /// The bytes do not start with the wasm magic number.
    #[error("not WebAssembly (no `\\0asm` magic number; {len} bytes)")]
    NotWasm {
        /// The input length.
        len: usize,
    },
    /// The bytes are a core WebAssembly module, not a component.
    #[error("the bytes are a core WebAssembly module, not a component")]
    CoreModule,
    /// The bytes end before the component does.
    #[error("truncated at byte {offset}: {message}")]
    Truncated {
        /// Where decoding ran out of bytes.
        offset: usize,
        /// The validator's message.
        message: String,
    },
    /// The bytes are malformed or fail validation (including use of a
    /// feature the engine does not accept).
    #[error("invalid at byte {offset}: {message}")]
    Invalid {
        /// Where the validator stopped.
        offset: usize,
        /// The validator's message.
        message: String,
    },
    /// A top-level or interface export whose kind has no place in a
    /// contract (a core module, a nested component, a value, an instance
    /// inside an instance).
    #[error("export `{name}` is a {kind}; a contract exports interfaces and functions only")]
    UnsupportedExport {
        /// The export name (`interface#item` inside an interface).
        name: String,
        /// Its kind.
        kind: &'static str,
    },
    /// A parameter or result uses a type the contract cannot describe (not
    /// reachable with [`engine_features`], refused rather than guessed).
    #[error("function `{function}` uses unsupported type {kind}")]
    UnsupportedType {
        /// The function (`interface#function` inside an interface).
        function: String,
        /// The type's kind.
        kind: &'static str,
    },
    /// A function's types exceed the contract depth or aggregate node bound.
    #[error("{source} (at function `{function}`)")]
    TooComplex {
        /// The function whose measurement crossed the bound.
        function: String,
        /// The bound's refusal (`BoundError::ContractTooComplex`).
        source: BoundError,
    },
    /// The validator's type information was inconsistent with itself.
    /// Never expected; refused instead of panicking.
    #[error("inconsistent type information ({what})")]
    Inconsistent {
        /// What could not be resolved.
        what: &'static str,
    },
}

impl InspectError {
    /// The failure's [`Class`](custos_core::Class): what the caller does next
    /// (a component custos cannot describe is `Unsupported`, one over the complexity bound `ResourceExhausted`).
    pub fn class(&self) -> custos_core::Class {
        use custos_core::Class;
        match self {
            InspectError::NotWasm { .. } => Class::InvalidArgument,
            InspectError::CoreModule => Class::InvalidArgument,
            InspectError::Truncated { .. } => Class::InvalidArgument,
            InspectError::Invalid { .. } => Class::InvalidArgument,
            InspectError::UnsupportedExport { .. } => Class::Unsupported,
            InspectError::UnsupportedType { .. } => Class::Unsupported,
            InspectError::TooComplex { .. } => Class::ResourceExhausted,
            InspectError::Inconsistent { .. } => Class::InvalidArgument,
        }
    }
}

/// Validates `bytes` as a component and extracts its exported contract
/// (core's [`Contract`]), without compiling or instantiating it. Total: any input yields a contract
/// or a typed refusal.
pub fn inspect(bytes: &[u8]) -> Result<Contract, InspectError> {
    check_header(bytes)?;
    check_framing(bytes)?;
    let types = Validator::new_with_features(engine_features())
        .validate_all(bytes)
        .map_err(|e| {
            let offset = e.offset();
            let message = e.message().to_string();
            if message.contains("unexpected end") {
                InspectError::Truncated { offset, message }
            } else {
                InspectError::Invalid { offset, message }
            }
        })?;
    let names = top_level_export_names(bytes)?;
    let types = types.as_ref();
    let mut exports = Vec::with_capacity(names.len());
    for name in names {
        let item = types
            .component_item_for_export(&name)
            .ok_or(InspectError::Inconsistent {
                what: "export without a type",
            })?;
        exports.push((name, item));
    }
    let resources = resource_names(&types, &exports);
    let cx = Cx {
        types,
        resources: &resources,
    };

    // Pass 1: measure everything, refusing before anything recursive is
    // built; pass 2: build (bounded by pass 1).
    let meter = cx.measure_exports(&exports)?;
    let contract = cx.build_exports(&exports)?;
    // The walk above and core's explicit-stack measure must agree.
    let shape = contract.shape();
    if (shape.depth, shape.nodes) != (meter.max_depth, meter.nodes) {
        return Err(InspectError::Inconsistent {
            what: "measured shape differs from the built contract",
        });
    }
    Ok(contract)
}

/// Refuses garbage, core modules and a truncated header before validation.
fn check_header(bytes: &[u8]) -> Result<(), InspectError> {
    let magic_len = bytes.len().min(WASM_MAGIC.len());
    if bytes.is_empty() || bytes.get(..magic_len) != WASM_MAGIC.get(..magic_len) {
        return Err(InspectError::NotWasm { len: bytes.len() });
    }
    if bytes.len() < 8 {
        return Err(InspectError::Truncated {
            offset: bytes.len(),
            message: "unexpected end-of-file in the 8-byte header".to_string(),
        });
    }
    if Parser::is_core_wasm(bytes) {
        return Err(InspectError::CoreModule);
    }
    // Any other version/layer is left to the validator's message.
    Ok(())
}

/// Checks that every section of the component, and of every module or
/// component nested in it, fits inside its parent. `wasmparser` parses a
/// nested module or component to the end of the input when the input ends
/// early, without holding it to its section's declared size: a component cut
/// inside a nested module at one of that module's own section boundaries
/// would otherwise validate. Iterative (an explicit work list, each entry at
/// least a header long), so bounded by the input.
fn check_framing(bytes: &[u8]) -> Result<(), InspectError> {
    let mut regions = vec![(0usize, bytes.len())];
    while let Some((start, end)) = regions.pop() {
        let region = bytes.get(start..end).ok_or(InspectError::Inconsistent {
            what: "section region",
        })?;
        if region.len() < 8 {
            return Err(InspectError::Truncated {
                offset: end,
                message: format!(
                    "unexpected end-of-file: a nested header at byte {start} has {} of 8 bytes",
                    region.len()
                ),
            });
        }
        let nests = Parser::is_component(region);
        let mut pos = start + 8;
        while pos < end {
            let id = bytes.get(pos).copied().unwrap_or(0);
            pos += 1;
            let (size, used) = read_var_u32(bytes.get(pos..end).unwrap_or(&[]), pos)?;
            pos += used;
            let size = usize::try_from(size).unwrap_or(usize::MAX);
            if size > end - pos {
                return Err(InspectError::Truncated {
                    offset: end,
                    message: format!(
                        "unexpected end-of-file: section {id} at byte {pos} declares {size} bytes, {} remain",
                        end - pos
                    ),
                });
            }
            // In a component, section 1 is a core module and 4 a component.
            if nests && (id == 1 || id == 4) {
                regions.push((pos, pos + size));
            }
            pos += size;
        }
    }
    Ok(())
}

/// An unsigned LEB128 `u32` at the start of `bytes` (`offset` for messages):
/// the value and the bytes it used.
fn read_var_u32(bytes: &[u8], offset: usize) -> Result<(u32, usize), InspectError> {
    let mut value = 0u32;
    for (i, byte) in bytes.iter().take(5).enumerate() {
        let low = u32::from(byte & 0x7f);
        if i == 4 && low > 0x0f {
            break;
        }
        value |= low << (7 * i);
        if byte & 0x80 == 0 {
            return Ok((value, i + 1));
        }
    }
    if bytes.len() < 5 && bytes.iter().all(|b| b & 0x80 != 0) {
        return Err(InspectError::Truncated {
            offset: offset + bytes.len(),
            message: "unexpected end-of-file in a section size".to_string(),
        });
    }
    Err(InspectError::Invalid {
        offset,
        message: "invalid section size (not a LEB128 u32)".to_string(),
    })
}

/// The names of the top-level export section entries, in order (nested
/// modules' and components' exports excluded).
fn top_level_export_names(bytes: &[u8]) -> Result<Vec<String>, InspectError> {
    let mut names = Vec::new();
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(bytes) {
        let payload = payload.map_err(|e| InspectError::Invalid {
            offset: e.offset(),
            message: e.message().to_string(),
        })?;
        match payload {
            Payload::Version { .. } => depth = depth.saturating_add(1),
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ComponentExportSection(section) if depth == 1 => {
                for export in section {
                    let export = export.map_err(|e| InspectError::Invalid {
                        offset: e.offset(),
                        message: e.message().to_string(),
                    })?;
                    names.push(export.name.name.to_string());
                }
            }
            _ => {}
        }
    }
    Ok(names)
}

/// Names every resource type exported at the top level or by an exported
/// instance (first name wins), so `own`/`borrow` can say which resource. A
/// handle to a resource the component does not export (an imported one) is
/// named `resource`.
fn resource_names(
    types: &TypesRef<'_>,
    exports: &[(String, &ComponentItem)],
) -> HashMap<ResourceId, String> {
    let mut out = HashMap::new();
    let mut note = |item: &ComponentItem, name: &str| {
        if let ComponentEntityType::Type {
            referenced,
            created,
        } = &item.ty
        {
            for id in [referenced, created] {
                if let ComponentAnyTypeId::Resource(r) = id {
                    out.entry(r.resource()).or_insert_with(|| name.to_string());
                }
            }
        }
    };
    for (name, item) in exports {
        note(item, name);
        if let ComponentEntityType::Instance(id) = &item.ty {
            if let Some(inst) = types.get(*id) {
                for (inner, item) in &inst.exports {
                    note(item, inner);
                }
            }
        }
    }
    out
}

fn kind_of(ty: &ComponentEntityType) -> &'static str {
    match ty {
        ComponentEntityType::Module(_) => "core module",
        ComponentEntityType::Func(_) => "function",
        ComponentEntityType::Value(_) => "value",
        ComponentEntityType::Type { .. } => "type",
        ComponentEntityType::Instance(_) => "instance",
        ComponentEntityType::Component(_) => "component",
    }
}

#[derive(Default)]
struct Meter {
    nodes: u64,
    max_depth: u32,
}

struct Cx<'a> {
    types: TypesRef<'a>,
    resources: &'a HashMap<ResourceId, String>,
}

impl<'a> Cx<'a> {
    /// Pass 1 of [`inspect`]: measures every export's functions (refusing
    /// an unsupported export kind) before anything recursive is built.
    fn measure_exports(&self, exports: &[(String, &ComponentItem)]) -> Result<Meter, InspectError> {
        let mut meter = Meter::default();
        for (name, item) in exports {
            match &item.ty {
                ComponentEntityType::Func(id) => {
                    let f = self.func(*id)?;
                    self.measure_func(name, f, &mut meter)?;
                }
                ComponentEntityType::Instance(id) => {
                    let inst = self
                        .types
                        .get(*id)
                        .ok_or(InspectError::Inconsistent { what: "instance" })?;
                    for (inner, item) in &inst.exports {
                        match &item.ty {
                            ComponentEntityType::Func(fid) => {
                                let f = self.func(*fid)?;
                                self.measure_func(&format!("{name}#{inner}"), f, &mut meter)?;
                            }
                            ComponentEntityType::Type { .. } => {}
                            other => {
                                return Err(InspectError::UnsupportedExport {
                                    name: format!("{name}#{inner}"),
                                    kind: kind_of(other),
                                })
                            }
                        }
                    }
                }
                ComponentEntityType::Type { .. } => {}
                other => {
                    return Err(InspectError::UnsupportedExport {
                        name: name.clone(),
                        kind: kind_of(other),
                    })
                }
            }
        }
        Ok(meter)
    }

    /// Pass 2 of [`inspect`], bounded by pass 1: the contract. A top-level
    /// function becomes an interface named after it (core's convention).
    fn build_exports(
        &self,
        exports: &[(String, &ComponentItem)],
    ) -> Result<Contract, InspectError> {
        let mut contract = Contract {
            interfaces: Vec::with_capacity(exports.len()),
        };
        for (name, item) in exports {
            match &item.ty {
                ComponentEntityType::Func(id) => {
                    let function = self.build_func(name, self.func(*id)?)?;
                    contract.interfaces.push(Interface {
                        docs: None,
                        name: name.clone(),
                        functions: vec![function],
                    });
                }
                ComponentEntityType::Instance(id) => {
                    let inst = self
                        .types
                        .get(*id)
                        .ok_or(InspectError::Inconsistent { what: "instance" })?;
                    let mut iface = Interface {
                        docs: None,
                        name: name.clone(),
                        functions: Vec::new(),
                    };
                    for (inner, item) in &inst.exports {
                        if let ComponentEntityType::Func(fid) = &item.ty {
                            iface
                                .functions
                                .push(self.build_func(inner, self.func(*fid)?)?);
                        }
                    }
                    contract.interfaces.push(iface);
                }
                _ => {}
            }
        }
        Ok(contract)
    }

    fn func(
        &self,
        id: wasmparser::component_types::ComponentFuncTypeId,
    ) -> Result<&'a ComponentFuncType, InspectError> {
        self.types
            .get(id)
            .ok_or(InspectError::Inconsistent { what: "function" })
    }

    fn defined(
        &self,
        id: wasmparser::component_types::ComponentDefinedTypeId,
    ) -> Result<&'a ComponentDefinedType, InspectError> {
        self.types.get(id).ok_or(InspectError::Inconsistent {
            what: "defined type",
        })
    }

    fn measure_func(
        &self,
        name: &str,
        f: &ComponentFuncType,
        meter: &mut Meter,
    ) -> Result<(), InspectError> {
        if f.async_ {
            return Err(InspectError::UnsupportedType {
                function: name.to_string(),
                kind: "async function",
            });
        }
        for (_, ty) in f.params.iter() {
            self.measure(name, ty, 1, meter)?;
        }
        if let Some(ty) = &f.result {
            self.measure(name, ty, 1, meter)?;
        }
        Ok(())
    }

    /// Counts `ty` at `depth`, checking both bounds *before* descending.
    fn measure(
        &self,
        function: &str,
        ty: &ComponentValType,
        depth: u32,
        meter: &mut Meter,
    ) -> Result<(), InspectError> {
        let nodes = meter.nodes.saturating_add(1);
        check_contract_shape(depth, nodes).map_err(|source| InspectError::TooComplex {
            function: function.to_string(),
            source,
        })?;
        meter.nodes = nodes;
        meter.max_depth = meter.max_depth.max(depth);
        let id = match ty {
            ComponentValType::Primitive(p) => return primitive(function, *p).map(|_| ()),
            ComponentValType::Type(id) => *id,
        };
        let next = depth.saturating_add(1);
        let unsupported = |kind| {
            Err(InspectError::UnsupportedType {
                function: function.to_string(),
                kind,
            })
        };
        match self.defined(id)? {
            ComponentDefinedType::Primitive(p) => primitive(function, *p).map(|_| ()),
            ComponentDefinedType::Record(r) => {
                for t in r.fields.values() {
                    self.measure(function, t, next, meter)?;
                }
                Ok(())
            }
            ComponentDefinedType::Variant(v) => {
                for t in v.cases.values().filter_map(|c| c.ty.as_ref()) {
                    self.measure(function, t, next, meter)?;
                }
                Ok(())
            }
            ComponentDefinedType::Tuple(t) => {
                for t in t.types.iter() {
                    self.measure(function, t, next, meter)?;
                }
                Ok(())
            }
            ComponentDefinedType::List { element: t, .. }
            | ComponentDefinedType::Option { ty: t, .. } => self.measure(function, t, next, meter),
            ComponentDefinedType::Result { ok, err, .. } => {
                for t in ok.iter().chain(err.iter()) {
                    self.measure(function, t, next, meter)?;
                }
                Ok(())
            }
            ComponentDefinedType::Flags(_)
            | ComponentDefinedType::Enum(_)
            | ComponentDefinedType::Own(_)
            | ComponentDefinedType::Borrow(_) => Ok(()),
            ComponentDefinedType::Map { .. } => unsupported("map"),
            ComponentDefinedType::FixedLengthList { .. } => unsupported("fixed-length list"),
            ComponentDefinedType::Future { .. } => unsupported("future"),
            ComponentDefinedType::Stream { .. } => unsupported("stream"),
        }
    }

    fn build_func(&self, name: &str, f: &ComponentFuncType) -> Result<Function, InspectError> {
        let mut params = Vec::with_capacity(f.params.len());
        for (pname, ty) in f.params.iter() {
            params.push(Param {
                name: pname.as_str().to_string(),
                ty: self.build(name, ty, 1)?,
            });
        }
        let results = match &f.result {
            Some(ty) => vec![self.build(name, ty, 1)?],
            None => Vec::new(),
        };
        Ok(Function {
            docs: None,
            name: name.to_string(),
            params,
            results,
        })
    }

    /// Converts a measured type. `depth` is re-checked as a guard so this
    /// recursion is bounded on its own too.
    fn build(
        &self,
        function: &str,
        ty: &ComponentValType,
        depth: u32,
    ) -> Result<ValType, InspectError> {
        if depth > MAX_TYPE_DEPTH {
            return Err(InspectError::Inconsistent {
                what: "type deeper than measured",
            });
        }
        let id = match ty {
            ComponentValType::Primitive(p) => return primitive(function, *p),
            ComponentValType::Type(id) => *id,
        };
        let next = depth.saturating_add(1);
        let boxed = |t: &ComponentValType| self.build(function, t, next).map(Box::new);
        Ok(match self.defined(id)? {
            ComponentDefinedType::Primitive(p) => primitive(function, *p)?,
            ComponentDefinedType::Record(r) => ValType::Record(self.fields(function, r, next)?),
            ComponentDefinedType::Variant(v) => ValType::Variant(self.cases(function, v, next)?),
            ComponentDefinedType::Tuple(t) => {
                let mut elems = Vec::with_capacity(t.types.len());
                for t in t.types.iter() {
                    elems.push(self.build(function, t, next)?);
                }
                ValType::Tuple(elems)
            }
            ComponentDefinedType::List { element, .. } => ValType::List(boxed(element)?),
            ComponentDefinedType::Option { ty, .. } => ValType::Option(boxed(ty)?),
            ComponentDefinedType::Result { ok, err, .. } => ValType::Result {
                ok: ok.as_ref().map(boxed).transpose()?,
                err: err.as_ref().map(boxed).transpose()?,
            },
            ComponentDefinedType::Flags(names) => {
                ValType::Flags(names.iter().map(|n| n.as_str().to_string()).collect())
            }
            ComponentDefinedType::Enum(names) => {
                ValType::Enum(names.iter().map(|n| n.as_str().to_string()).collect())
            }
            ComponentDefinedType::Own(r) => ValType::Own(self.resource_name(r)),
            ComponentDefinedType::Borrow(r) => ValType::Borrow(self.resource_name(r)),
            ComponentDefinedType::Map { .. }
            | ComponentDefinedType::FixedLengthList { .. }
            | ComponentDefinedType::Future { .. }
            | ComponentDefinedType::Stream { .. } => {
                return Err(InspectError::Inconsistent {
                    what: "unsupported type after measurement",
                })
            }
        })
    }

    /// A record's fields, each type built one level deeper.
    fn fields(
        &self,
        function: &str,
        r: &RecordType,
        next: u32,
    ) -> Result<Vec<Field>, InspectError> {
        let mut fields = Vec::with_capacity(r.fields.len());
        for (name, t) in &r.fields {
            fields.push(Field {
                name: name.as_str().to_string(),
                ty: self.build(function, t, next)?,
            });
        }
        Ok(fields)
    }

    /// A variant's cases, each payload type built one level deeper.
    fn cases(&self, function: &str, v: &VariantType, next: u32) -> Result<Vec<Case>, InspectError> {
        let mut cases = Vec::with_capacity(v.cases.len());
        for (name, c) in &v.cases {
            cases.push(Case {
                name: name.as_str().to_string(),
                ty: match &c.ty {
                    Some(t) => Some(self.build(function, t, next)?),
                    None => None,
                },
            });
        }
        Ok(cases)
    }

    fn resource_name(&self, r: &AliasableResourceId) -> String {
        let id = self
            .types
            .peel_alias(*r)
            .map(|a| a.resource())
            .unwrap_or_else(|| r.resource());
        self.resources
            .get(&id)
            .or_else(|| self.resources.get(&r.resource()))
            .cloned()
            .unwrap_or_else(|| "resource".to_string())
    }
}

fn primitive(function: &str, p: PrimitiveValType) -> Result<ValType, InspectError> {
    Ok(match p {
        PrimitiveValType::Bool => ValType::Bool,
        PrimitiveValType::S8 => ValType::S8,
        PrimitiveValType::U8 => ValType::U8,
        PrimitiveValType::S16 => ValType::S16,
        PrimitiveValType::U16 => ValType::U16,
        PrimitiveValType::S32 => ValType::S32,
        PrimitiveValType::U32 => ValType::U32,
        PrimitiveValType::S64 => ValType::S64,
        PrimitiveValType::U64 => ValType::U64,
        PrimitiveValType::F32 => ValType::F32,
        PrimitiveValType::F64 => ValType::F64,
        PrimitiveValType::Char => ValType::Char,
        PrimitiveValType::String => ValType::String,
        PrimitiveValType::ErrorContext => {
            return Err(InspectError::UnsupportedType {
                function: function.to_string(),
                kind: "error-context",
            })
        }
    })
}
