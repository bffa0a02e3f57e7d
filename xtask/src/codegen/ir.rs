//! What the wire generator tells the model generator about each generated type.

use std::collections::BTreeMap;

/// What the model generator needs to know of one generated type.
#[derive(Debug, Clone)]
pub(crate) enum Shape {
    /// A struct: its fields and whether it keeps unknown members in `extra`.
    Struct { fields: Vec<FieldIr>, open: bool },
    /// A closed set of strings.
    Enum { values: Vec<String> },
    /// An enum whose variants carry a payload (its full Rust type) or nothing.
    Union {
        variants: Vec<(String, Option<String>)>,
    },
    /// `pub type Name = target;`
    Alias(String),
}

/// One field of a generated struct.
#[derive(Debug, Clone)]
pub(crate) struct FieldIr {
    pub(crate) ident: String,
    pub(crate) wire: String,
    /// The full Rust type, `Option` included.
    pub(crate) ty: String,
    pub(crate) doc: String,
}

/// A generated type as the model generator sees it.
#[derive(Debug, Clone)]
pub(crate) struct TypeIr {
    pub(crate) shape: Shape,
    pub(crate) doc: String,
    /// A schema definition (rather than an inline type named after its place).
    pub(crate) is_def: bool,
    /// Decodes (is in the round-trip registry).
    pub(crate) registered: bool,
}

/// The generated types of one schema file.
#[derive(Debug, Clone)]
pub(crate) struct ModuleIr {
    pub(crate) version: String,
    pub(crate) module: String,
    pub(crate) feature: String,
    pub(crate) types: BTreeMap<String, TypeIr>,
    /// Names re-exported from the base module, with that module's name.
    pub(crate) reexports: BTreeMap<String, String>,
    /// The unions dispatched on `method` (requests, notifications): name -> methods, in the
    /// schema's order.
    pub(crate) method_unions: BTreeMap<String, Vec<String>>,
}
