//! Contract metadata: the interfaces and functions a release's component
//! exports, with typed parameters and results bounded in depth and size,
//! and the component-inspection port.
//!
//! Types are a recursive enum ([`ValType`]). Its structure is bounded —
//! depth at most [`MAX_TYPE_DEPTH`] (the root counts one) and at most
//! [`MAX_TYPE_NODES`] nodes across every parameter and result of a
//! contract — and the bound is checked **before** any recursive conversion
//! or serialization, by an explicit-stack walk ([`Contract::shape`]), and
//! again when persisted metadata is read ([`shape_of_json`], over the parsed
//! JSON value, before it is converted). All recursive variants count: both
//! branches of a result, every tuple element, record field and variant case.
//!
//! [`ComponentInspector`] is the port a component validator implements
//! (the Wasm shell does it with a component parser); the release repository
//! takes one at open. Shells never depend on each other: the cli wires them.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use thiserror::Error;

use super::bounds::{check_contract_shape, BoundError};
pub use super::bounds::{MAX_TYPE_DEPTH, MAX_TYPE_NODES};

/// A value type of a contract parameter or result.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ValType {
    /// `bool`.
    Bool,
    /// `s8`.
    S8,
    /// `u8`.
    U8,
    /// `s16`.
    S16,
    /// `u16`.
    U16,
    /// `s32`.
    S32,
    /// `u32`.
    U32,
    /// `s64`.
    S64,
    /// `u64`.
    U64,
    /// `f32`.
    F32,
    /// `f64`.
    F64,
    /// `char`.
    Char,
    /// `string`.
    String,
    /// `list<T>`.
    List(Box<ValType>),
    /// `option<T>`.
    Option(Box<ValType>),
    /// `result<ok, err>`, either branch optional.
    Result {
        /// The ok branch.
        ok: Option<Box<ValType>>,
        /// The error branch.
        err: Option<Box<ValType>>,
    },
    /// `tuple<..>`.
    Tuple(Vec<ValType>),
    /// A record of named fields.
    Record(Vec<Field>),
    /// A variant of named cases, each with an optional payload.
    Variant(Vec<Case>),
    /// An enum of case names.
    Enum(Vec<String>),
    /// A flags set.
    Flags(Vec<String>),
    /// An owned handle to the named resource.
    Own(String),
    /// A borrowed handle to the named resource.
    Borrow(String),
}

/// A record field.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Field {
    /// The field name.
    pub name: String,
    /// Its type.
    pub ty: ValType,
}

/// A variant case.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Case {
    /// The case name.
    pub name: String,
    /// Its payload type, if any.
    pub ty: Option<ValType>,
}

/// A named, typed function parameter.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Param {
    /// The parameter name.
    pub name: String,
    /// Its type.
    pub ty: ValType,
}

/// An exported function.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Function {
    /// The function name.
    pub name: String,
    /// Its documentation, if the publisher supplied any. Part of the
    /// contract's canonical metadata (and so of its compatibility
    /// fingerprint); absent is encoded as no field at all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub docs: Option<String>,
    /// Its parameters, in order.
    pub params: Vec<Param>,
    /// Its results, in order.
    pub results: Vec<ValType>,
}

/// An exported interface (or, for a bare exported function, an interface
/// named after the function).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Interface {
    /// The export name.
    pub name: String,
    /// Its documentation, if the publisher supplied any. Part of the
    /// contract's canonical metadata (and so of its compatibility
    /// fingerprint); absent is encoded as no field at all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub docs: Option<String>,
    /// Its functions.
    pub functions: Vec<Function>,
}

/// A release's contract metadata: its exported interfaces.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(
    feature = "schema",
    schemars(
        description = "A release's contract metadata, as `custos releases publish --contract` \
                            reads it (at most 4 MiB): its exported interfaces, in order. The \
                            interface names, sorted and deduplicated, must be the manifest's \
                            exports; every parameter and result type is at most 32 deep (the \
                            root counts one), with at most 16384 type nodes across the contract."
    )
)]
#[serde(deny_unknown_fields)]
pub struct Contract {
    /// The exported interfaces, in the order given.
    pub interfaces: Vec<Interface>,
}

/// A contract's type structure: the deepest type (root = 1) and the total
/// number of type nodes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Shape {
    /// The greatest depth of any parameter or result type.
    pub depth: u32,
    /// Type nodes across every parameter and result.
    pub nodes: u64,
}

impl Shape {
    /// Checks the shape against [`MAX_TYPE_DEPTH`] and [`MAX_TYPE_NODES`].
    pub fn check(&self) -> Result<(), BoundError> {
        check_contract_shape(self.depth, self.nodes)
    }
}

impl ValType {
    /// The direct child types, in order (both result branches, every tuple
    /// element, field and case payload).
    pub fn children(&self) -> Vec<&ValType> {
        match self {
            ValType::List(t) | ValType::Option(t) => vec![t],
            ValType::Result { ok, err } => ok.iter().chain(err.iter()).map(|b| &**b).collect(),
            ValType::Tuple(ts) => ts.iter().collect(),
            ValType::Record(fs) => fs.iter().map(|f| &f.ty).collect(),
            ValType::Variant(cs) => cs.iter().filter_map(|c| c.ty.as_ref()).collect(),
            _ => Vec::new(),
        }
    }
}

impl Contract {
    /// Every root type: each parameter's and each result's.
    pub fn roots(&self) -> impl Iterator<Item = &ValType> {
        self.interfaces.iter().flat_map(|i| {
            i.functions
                .iter()
                .flat_map(|f| f.params.iter().map(|p| &p.ty).chain(f.results.iter()))
        })
    }

    /// The contract's type structure, measured with an explicit stack (no
    /// recursion, so any tree can be measured). Stops counting once either
    /// bound is exceeded (the result is then already refused).
    pub fn shape(&self) -> Shape {
        let mut shape = Shape::default();
        let mut stack: Vec<(&ValType, u32)> = self.roots().map(|t| (t, 1)).collect();
        while let Some((ty, depth)) = stack.pop() {
            shape.nodes = shape.nodes.saturating_add(1);
            shape.depth = shape.depth.max(depth);
            if shape.depth > MAX_TYPE_DEPTH || shape.nodes > MAX_TYPE_NODES {
                break;
            }
            stack.extend(
                ty.children()
                    .into_iter()
                    .map(|c| (c, depth.saturating_add(1))),
            );
        }
        shape
    }

    /// Whether `self` and `other` export the same interfaces, functions and
    /// types in the same order, documentation aside: what a component
    /// inspector can check against a declared contract (a component's
    /// extracted contract carries no documentation).
    pub fn same_types(&self, other: &Contract) -> bool {
        self.interfaces.len() == other.interfaces.len()
            && self.interfaces.iter().zip(&other.interfaces).all(|(a, b)| {
                a.name == b.name
                    && a.functions.len() == b.functions.len()
                    && a.functions.iter().zip(&b.functions).all(|(f, g)| {
                        f.name == g.name && f.params == g.params && f.results == g.results
                    })
            })
    }

    /// Bytes of documentation across every interface and function.
    pub fn docs_bytes(&self) -> u64 {
        let len = |d: &Option<String>| {
            d.as_ref()
                .map_or(0, |d| u64::try_from(d.len()).unwrap_or(u64::MAX))
        };
        self.interfaces
            .iter()
            .map(|i| len(&i.docs) + i.functions.iter().map(|f| len(&f.docs)).sum::<u64>())
            .sum()
    }

    /// The export names, sorted and deduplicated.
    pub fn export_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.interfaces.iter().map(|i| i.name.clone()).collect();
        names.sort();
        names.dedup();
        names
    }
}

/// The child type values of one JSON type node, as [`ValType`]'s serde
/// encoding writes them. A value that is not a type node has none (its
/// conversion fails later).
fn json_children(v: &Value) -> Vec<&Value> {
    let Some(obj) = v.as_object() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (tag, inner) in obj {
        match tag.as_str() {
            "list" | "option" => out.push(inner),
            "result" => {
                if let Some(o) = inner.as_object() {
                    out.extend(
                        ["ok", "err"]
                            .iter()
                            .filter_map(|k| o.get(*k))
                            .filter(|c| !c.is_null()),
                    );
                }
            }
            "tuple" => out.extend(inner.as_array().into_iter().flatten()),
            "record" | "variant" => out.extend(
                inner
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|f| f.get("ty"))
                    .filter(|c| !c.is_null()),
            ),
            _ => {}
        }
    }
    out
}

/// The type structure of a contract as parsed JSON, before it is converted
/// to [`Contract`] (the read-side check). Explicit stack; stops counting
/// once a bound is exceeded.
pub fn shape_of_json(contract: &Value) -> Shape {
    let mut stack: Vec<(&Value, u32)> = Vec::new();
    let interfaces = contract.get("interfaces").and_then(Value::as_array);
    for f in interfaces
        .into_iter()
        .flatten()
        .filter_map(|i| i.get("functions").and_then(Value::as_array))
        .flatten()
    {
        let params = f
            .get("params")
            .and_then(Value::as_array)
            .into_iter()
            .flatten();
        stack.extend(params.filter_map(|p| p.get("ty")).map(|t| (t, 1)));
        let results = f
            .get("results")
            .and_then(Value::as_array)
            .into_iter()
            .flatten();
        stack.extend(results.map(|t| (t, 1)));
    }
    let mut shape = Shape::default();
    while let Some((ty, depth)) = stack.pop() {
        shape.nodes = shape.nodes.saturating_add(1);
        shape.depth = shape.depth.max(depth);
        if shape.depth > MAX_TYPE_DEPTH || shape.nodes > MAX_TYPE_NODES {
            break;
        }
        stack.extend(
            json_children(ty)
                .into_iter()
                .map(|c| (c, depth.saturating_add(1))),
        );
    }
    shape
}

/// A component the inspector refused.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Error)]
#[error("InvalidComponent: {reason}")]
pub struct ComponentRejected {
    /// Why.
    pub reason: String,
}

/// The component-inspection port: validates a release's component bytes
/// without preparing or instantiating them. Returns the contract it
/// extracted, which the publication's declared contract must equal, or
/// `None` when this inspector validates without extracting (the declared
/// contract is then taken as given).
pub trait ComponentInspector: Send + Sync {
    /// Validates `component`.
    fn inspect(&self, component: &[u8]) -> Result<Option<Contract>, ComponentRejected>;
}

impl<F> ComponentInspector for F
where
    F: Fn(&[u8]) -> Result<Option<Contract>, ComponentRejected> + Send + Sync,
{
    fn inspect(&self, component: &[u8]) -> Result<Option<Contract>, ComponentRejected> {
        self(component)
    }
}

/// The Wasm binary magic every component starts with.
pub const WASM_MAGIC: &[u8; 4] = b"\0asm";

/// A minimal inspector for tests and tools without a component parser:
/// accepts bytes starting with [`WASM_MAGIC`], extracts nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct MagicOnly;

impl ComponentInspector for MagicOnly {
    fn inspect(&self, component: &[u8]) -> Result<Option<Contract>, ComponentRejected> {
        if component.starts_with(WASM_MAGIC) {
            Ok(None)
        } else {
            Err(ComponentRejected {
                reason: "component does not start with the wasm magic".into(),
            })
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A contract of one interface, `api`, exporting one function; the
    /// release and deployment tests build theirs with it too.
    pub(crate) fn api_contract(
        function: &str,
        params: Vec<Param>,
        results: Vec<ValType>,
    ) -> Contract {
        Contract {
            interfaces: vec![Interface {
                docs: None,
                name: "api".into(),
                functions: vec![Function {
                    docs: None,
                    name: function.into(),
                    params,
                    results,
                }],
            }],
        }
    }

    fn nest(depth: u32) -> ValType {
        let mut t = ValType::U8;
        for i in 1..depth {
            t = match i % 4 {
                0 => ValType::List(Box::new(t)),
                1 => ValType::Result {
                    ok: Some(Box::new(ValType::Bool)),
                    err: Some(Box::new(t)),
                },
                2 => ValType::Tuple(vec![ValType::U8, t]),
                _ => ValType::Record(vec![Field {
                    name: "f".into(),
                    ty: t,
                }]),
            };
        }
        t
    }

    fn contract(ty: ValType) -> Contract {
        let x = Param {
            name: "x".into(),
            ty: ty.clone(),
        };
        api_contract("f", vec![x], vec![ty])
    }

    #[test]
    fn depth_counts_the_root_and_every_variant_kind() {
        let c = contract(nest(32));
        let s = c.shape();
        assert_eq!(s.depth, 32);
        assert!(s.check().is_ok());
        let deep = contract(nest(33)).shape();
        assert_eq!(deep.depth, 33);
        assert!(deep.check().is_err());
        // the ok branch of a result participates too
        let ok_deep = ValType::Result {
            ok: Some(Box::new(nest(32))),
            err: None,
        };
        assert_eq!(contract(ok_deep).shape().depth, 33);
    }

    #[test]
    fn json_shape_agrees_with_the_typed_shape() {
        for depth in [1, 5, 32, 33] {
            let c = contract(nest(depth));
            let v = serde_json::to_value(&c).unwrap_or(Value::Null);
            assert_eq!(shape_of_json(&v), c.shape(), "depth {depth}");
        }
    }

    #[test]
    fn aggregate_nodes_are_bounded_across_functions() {
        let wide = ValType::Tuple(vec![ValType::U8; 4_100]);
        let mut c = contract(wide.clone());
        let again = c.interfaces[0].functions[0].clone();
        c.interfaces[0].functions.push(again);
        let s = c.shape();
        assert!(s.nodes > MAX_TYPE_NODES);
        assert!(s.check().is_err());
        assert!(contract(ValType::Tuple(vec![ValType::U8; 100]))
            .shape()
            .check()
            .is_ok());
    }

    #[test]
    fn magic_only_and_closures_are_inspectors() {
        assert_eq!(MagicOnly.inspect(b"\0asm\x0d\0\x01\0"), Ok(None));
        assert!(MagicOnly.inspect(b"ELF").is_err());
        let f = |_: &[u8]| Ok(Some(Contract::default()));
        assert_eq!(f.inspect(b""), Ok(Some(Contract::default())));
    }
}
