//! The wire types of one schema file: structs, enums and aliases here; method-dispatched unions
//! and their result enums in [`methods`]; the other unions in [`unions`].

mod methods;
mod unions;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde_json::{Map, Value};

use super::ir::{FieldIr, ModuleIr, Shape, TypeIr};
use super::names::*;
use crate::schema::{Error, Overrides, SchemaFile};

/// The marker types for string constants, shared by every version.
#[derive(Default)]
pub(super) struct Consts {
    /// value -> type name
    by_value: BTreeMap<String, String>,
}

impl Consts {
    fn name_for(&mut self, value: &str) -> Result<String, Error> {
        if let Some(name) = self.by_value.get(value) {
            return Ok(format!("crate::consts::{name}"));
        }
        let name = match value {
            "2.0" => "JsonRpc2".to_owned(),
            _ => {
                let p = pascal(value);
                if p.is_empty() || p.starts_with(|c: char| c.is_ascii_digit()) {
                    format!("V{p}")
                } else {
                    p
                }
            }
        };
        if self.by_value.values().any(|n| *n == name) {
            return Err(format!("two constants map to the marker type name {name}").into());
        }
        self.by_value.insert(value.to_owned(), name.clone());
        Ok(format!("crate::consts::{name}"))
    }

    pub(super) fn render(&self) -> String {
        let mut out = format!(
            "{PREAMBLE}\n//! Marker types for the fixed strings (`const`) of every schema version.\n\n\
             crate::support::const_strs! {{\n"
        );
        let mut by_name: Vec<_> = self.by_value.iter().collect();
        by_name.sort_by(|a, b| a.1.cmp(b.1));
        for (value, name) in by_name {
            let _ = writeln!(out, "    {name} = {},", rust_str(value));
        }
        out.push_str("}\n");
        out
    }
}

/// Names the schema uses for shapes the crate implements by hand.
fn builtin(name: &str) -> Option<&'static str> {
    Some(match name {
        "RequestId" => "crate::RequestId",
        "ProgressToken" => "crate::ProgressToken",
        "JSONValue" => "::serde_json::Value",
        "JSONObject" => "crate::JsonObject",
        "JSONArray" => "::std::vec::Vec<::serde_json::Value>",
        "ResultType" => "crate::ResultType",
        _ => return None,
    })
}

/// A Rust type for a schema.
#[derive(Debug, Clone)]
struct Ty {
    rust: String,
    /// The schema allows `null` besides the type.
    nullable: bool,
    /// Any JSON value (so `null` is a value, not absence).
    any: bool,
    /// Has a `Default` that is a valid value.
    default: bool,
}

impl Ty {
    fn plain(rust: impl Into<String>) -> Ty {
        Ty {
            rust: rust.into(),
            nullable: false,
            any: false,
            default: false,
        }
    }
    fn defaultable(mut self) -> Ty {
        self.default = true;
        self
    }
}
/// A method-dispatched union waiting for its result enum.
struct MethodArm {
    variant: String,
    method: String,
    params: Option<(String, bool)>,
    doc: String,
    def: String,
}

struct Module<'a> {
    defs: &'a Map<String, Value>,
    prefix: String,
    overrides: &'a Overrides,
    consts: &'a mut Consts,
    /// Rendered items by type name.
    items: BTreeMap<String, String>,
    /// Names reserved (defs) or used (inline types).
    taken: BTreeSet<String>,
    /// Canonical schema text -> type name, to reuse identical inline types.
    shapes: BTreeMap<String, String>,
    /// Defs generated or in progress.
    done: BTreeSet<String>,
    /// Names that `Deserialize` (for the round-trip registry).
    registry: BTreeSet<String>,
    /// Re-exported from the base module.
    reexports: BTreeMap<String, String>,
    /// What the model generator needs, by type name.
    ir: BTreeMap<String, (Shape, String)>,
    /// Method-dispatched unions: name -> methods, in the schema's order.
    method_unions: BTreeMap<String, Vec<String>>,
    /// Types that have a usable `Default`.
    defaultable: BTreeSet<String>,
}

pub(super) fn generate_module(
    file: &SchemaFile,
    schema: &Value,
    base: Option<(&SchemaFile, &Value)>,
    overrides: &Overrides,
    consts: &mut Consts,
) -> Result<(String, usize, ModuleIr), Error> {
    let (defs, prefix) = defs_of(schema)?;
    let mut m = Module {
        defs,
        prefix,
        overrides,
        consts,
        items: BTreeMap::new(),
        taken: BTreeSet::new(),
        shapes: BTreeMap::new(),
        done: BTreeSet::new(),
        registry: BTreeSet::new(),
        reexports: BTreeMap::new(),
        defaultable: BTreeSet::new(),
        ir: BTreeMap::new(),
        method_unions: BTreeMap::new(),
    };
    if let Some((base_file, base_schema)) = base {
        let (base_defs, _) = defs_of(base_schema)?;
        for (name, def) in defs {
            if let Some(base_def) = base_defs.get(name)
                && canonical(def) == canonical(base_def)
                && builtin(name).is_none()
            {
                m.reexports
                    .insert(name.clone(), format!("super::{}::{name}", base_file.module));
            }
        }
    }
    for name in defs.keys() {
        m.taken.insert(name.clone());
    }
    for (name, def) in defs {
        if !m.is_generated_def(name) {
            continue;
        }
        m.shapes
            .entry(canonical(&m.resolve_all_of(def)?))
            .or_insert_with(|| name.clone());
    }
    for name in defs.keys() {
        m.ensure_def(name)?;
    }
    let method_unions: Vec<(String, Vec<String>)> = overrides
        .method_unions
        .iter()
        .filter(|u| u.version == file.version)
        .map(|u| (u.name.clone(), u.members.clone()))
        .collect();
    for (name, members) in method_unions {
        let arms: Vec<Value> = members
            .iter()
            .map(|d| serde_json::json!({ "$ref": format!("{}{d}", m.prefix) }))
            .collect();
        m.taken.insert(name.clone());
        m.gen_method_union(&name, "", &arms)?;
    }

    let mut out = String::new();
    let _ = write!(
        out,
        "{PREAMBLE}\n//! Wire types of {}, generated from `{}` of {} at commit `{}`.\n\
         //!\n//! Corrections of the upstream typing from `schema/corrections.toml` are applied. Each \
         //! definition of the schema is a type of the same name; see the crate docs for how \
         //! unions and results are decoded.\n\n\
         #![allow(rustdoc::broken_intra_doc_links, rustdoc::invalid_html_tags, rustdoc::bare_urls)]\n\
         #![allow(clippy::large_enum_variant, clippy::doc_lazy_continuation, clippy::doc_overindented_list_items)]\n\n",
        title(&file.version),
        file.upstream_path,
        file.repository,
        file.commit
    );
    for (name, path) in &m.reexports {
        let _ = writeln!(out, "pub use {path};");
        let _ = name;
    }
    out.push('\n');
    // Types, not the extra impl blocks kept under `Type::method` keys.
    let count = m.items.keys().filter(|k| !k.contains("::")).count() + m.reexports.len();
    for item in m.items.values() {
        out.push_str(item);
        out.push('\n');
    }
    // The registry the round-trip tests use to reach every type by its schema name.
    let mut names: Vec<&String> = m.registry.iter().chain(m.reexports.keys()).collect();
    names.sort();
    names.dedup();
    out.push_str(
        "/// Decodes `value` as the type named `name` and encodes it again (for tests).\n\
         #[cfg(feature = \"__registry\")]\n#[doc(hidden)]\n\
         pub fn __roundtrip(name: &str, value: ::serde_json::Value) -> \
         ::core::option::Option<::core::result::Result<::serde_json::Value, ::serde_json::Error>> {\n\
         fn rt<T: ::serde::de::DeserializeOwned + ::serde::Serialize>(value: ::serde_json::Value) -> \
         ::core::result::Result<::serde_json::Value, ::serde_json::Error> {\n\
         ::serde_json::to_value(::serde_json::from_value::<T>(value)?)\n}\n\
         ::core::option::Option::Some(match name {\n",
    );
    for name in &names {
        let _ = writeln!(out, "    {} => rt::<{name}>(value),", rust_str(name));
    }
    out.push_str("    _ => return ::core::option::Option::None,\n})\n}\n\n");
    out.push_str("/// The schema names `__roundtrip` knows (for tests).\n#[cfg(feature = \"__registry\")]\n#[doc(hidden)]\npub const __TYPE_NAMES: &[&str] = &[\n");
    for name in &names {
        let _ = writeln!(out, "    {},", rust_str(name));
    }
    out.push_str("];\n");
    let types =
        m.ir.into_iter()
            .map(|(name, (shape, doc))| {
                let ir = TypeIr {
                    shape,
                    doc,
                    is_def: defs.contains_key(&name),
                    registered: m.registry.contains(&name),
                };
                (name, ir)
            })
            .collect();
    let reexports = m
        .reexports
        .keys()
        .map(|name| {
            (
                name.clone(),
                base.map(|(f, _)| f.module.clone()).unwrap_or_default(),
            )
        })
        .collect();
    let ir = ModuleIr {
        version: file.version.clone(),
        module: file.module.clone(),
        feature: file.feature.clone(),
        types,
        reexports,
        method_unions: m.method_unions,
    };
    Ok((out, count, ir))
}

fn title(version: &str) -> String {
    if let Some(extension) = version.strip_prefix("ext-") {
        format!("the `io.modelcontextprotocol/{extension}` extension")
    } else {
        format!("MCP protocol version {version}")
    }
}

fn defs_of(schema: &Value) -> Result<(&Map<String, Value>, String), Error> {
    if let Some(defs) = schema.get("$defs").and_then(Value::as_object) {
        Ok((defs, "#/$defs/".into()))
    } else if let Some(defs) = schema.get("definitions").and_then(Value::as_object) {
        Ok((defs, "#/definitions/".into()))
    } else {
        Err("the schema has neither $defs nor definitions".into())
    }
}

/// The schema with descriptions and `$schema` removed, as text: two schemas with the same canonical
/// text generate the same type.
fn canonical(schema: &Value) -> String {
    fn strip(v: &Value) -> Value {
        match v {
            Value::Object(map) => Value::Object(
                map.iter()
                    .filter(|(k, _)| *k != "description" && *k != "$schema")
                    .map(|(k, v)| (k.clone(), strip(v)))
                    .collect(),
            ),
            Value::Array(items) => Value::Array(items.iter().map(strip).collect()),
            other => other.clone(),
        }
    }
    strip(schema).to_string()
}

impl Module<'_> {
    fn is_generated_def(&self, name: &str) -> bool {
        builtin(name).is_none()
            && !self.overrides.skip.iter().any(|s| s == name)
            && !self.reexports.contains_key(name)
    }

    fn def(&self, name: &str) -> Result<&Value, Error> {
        self.defs
            .get(name)
            .ok_or_else(|| format!("unknown definition {name}").into())
    }

    fn ref_name<'v>(&self, reference: &'v str) -> Result<&'v str, Error> {
        reference
            .strip_prefix(self.prefix.as_str())
            .ok_or_else(|| format!("unsupported $ref {reference}").into())
    }

    /// Follows `$ref`s to the schema they name.
    fn deref<'v>(&'v self, schema: &'v Value) -> Result<&'v Value, Error> {
        match schema.get("$ref").and_then(Value::as_str) {
            Some(r) => self.deref(self.def(self.ref_name(r)?)?),
            None => Ok(schema),
        }
    }

    /// Merges `allOf` parts into one schema; a part that is a union distributes over it.
    fn resolve_all_of(&self, schema: &Value) -> Result<Value, Error> {
        let Some(parts) = schema.get("allOf").and_then(Value::as_array) else {
            return Ok(schema.clone());
        };
        let mut merged = Value::Object(Map::new());
        let mut union: Option<Vec<Value>> = None;
        for part in parts {
            let part = self.resolve_all_of(self.deref(part)?)?;
            if let Some(arms) = part.get("anyOf").and_then(Value::as_array) {
                if union.is_some() {
                    return Err("allOf with two unions is not supported".into());
                }
                union = Some(arms.clone());
            } else {
                merged = merge(&merged, &part);
            }
        }
        if let Some(description) = schema.get("description") {
            merged["description"] = description.clone();
        }
        match union {
            None => Ok(merged),
            Some(arms) => {
                let arms = arms
                    .iter()
                    .map(|arm| Ok(merge(&merged, &self.resolve_all_of(self.deref(arm)?)?)))
                    .collect::<Result<Vec<_>, Error>>()?;
                let mut out = Map::new();
                out.insert("anyOf".into(), Value::Array(arms));
                if let Some(description) = schema.get("description") {
                    out.insert("description".into(), description.clone());
                }
                Ok(Value::Object(out))
            }
        }
    }

    fn ensure_def(&mut self, name: &str) -> Result<(), Error> {
        if !self.is_generated_def(name) || !self.done.insert(name.to_owned()) {
            return Ok(());
        }
        let def = self.resolve_all_of(self.def(name)?)?;
        let doc = doc_of(&def);
        if def.get("anyOf").is_some() {
            let arms = def["anyOf"].as_array().cloned().unwrap_or_default();
            if arms
                .iter()
                .any(|a| a.get("type").and_then(Value::as_str) == Some("null"))
            {
                let ty = self.ty(&def, name)?;
                self.push_alias(name, &doc, &ty.rust);
            } else if arms.iter().all(|a| self.is_const_string(a)) {
                let values: Vec<String> = arms
                    .iter()
                    .map(|a| a["const"].as_str().unwrap_or_default().to_owned())
                    .collect();
                self.push_enum(name, &doc, &values);
            } else if self.is_method_union(&arms)? {
                self.gen_method_union(name, &doc, &arms)?;
            } else {
                self.gen_union(name, &doc, &arms)?;
            }
            return Ok(());
        }
        if let Some(r) = def.get("$ref").and_then(Value::as_str) {
            let target = self.ref_name(r)?.to_owned();
            let ty = self.named(&target)?;
            self.push_alias(name, &doc, &ty.rust);
            if ty.default {
                self.defaultable.insert(name.to_owned());
            }
            if self.is_generated_def(&target) || builtin(&target).is_some() {
                self.registry.insert(name.to_owned());
            }
            return Ok(());
        }
        if let Some(values) = def.get("enum").and_then(Value::as_array) {
            let values: Vec<String> = values
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect();
            self.push_enum(name, &doc, &values);
            return Ok(());
        }
        if def.get("type").and_then(Value::as_str) == Some("object")
            && def
                .get("properties")
                .and_then(Value::as_object)
                .is_some_and(|p| !p.is_empty())
        {
            self.gen_struct(name, &doc, &def)?;
            return Ok(());
        }
        let ty = self.ty_inner(&def, name)?;
        self.push_alias(name, &doc, &ty.rust);
        if ty.default {
            self.defaultable.insert(name.to_owned());
        }
        self.registry.insert(name.to_owned());
        Ok(())
    }

    fn push_alias(&mut self, name: &str, doc: &str, target: &str) {
        let doc = &doc_or_default(doc, name);
        self.ir.insert(
            name.to_owned(),
            (Shape::Alias(target.to_owned()), doc.clone()),
        );
        self.items.insert(
            name.to_owned(),
            format!("{doc}pub type {name} = {target};\n"),
        );
    }

    fn is_const_string(&self, schema: &Value) -> bool {
        schema.get("const").is_some_and(Value::is_string)
    }

    /// A named type: a def, a builtin, or a re-export.
    fn named(&mut self, name: &str) -> Result<Ty, Error> {
        if let Some(rust) = builtin(name) {
            let ty = Ty::plain(rust);
            return Ok(match name {
                "JSONValue" => Ty { any: true, ..ty },
                "JSONObject" | "JSONArray" | "ResultType" => ty.defaultable(),
                _ => ty,
            });
        }
        if self.overrides.skip.iter().any(|s| s == name) {
            return Err(format!("{name} is skipped but referenced").into());
        }
        self.ensure_def(name)?;
        let mut ty = Ty::plain(name);
        ty.default = self.defaultable.contains(name);
        Ok(ty)
    }

    /// The type of a schema used at `ctx` (the name an inline type gets).
    fn ty(&mut self, schema: &Value, ctx: &str) -> Result<Ty, Error> {
        let schema = self.resolve_all_of(schema)?;
        self.ty_inner(&schema, ctx)
    }

    fn ty_inner(&mut self, schema: &Value, ctx: &str) -> Result<Ty, Error> {
        if schema == &Value::Bool(true) {
            return Ok(Ty {
                any: true,
                ..Ty::plain("::serde_json::Value")
            });
        }
        if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
            let name = self.ref_name(r)?.to_owned();
            if let Some(path) = self.reexports.get(&name) {
                let _ = path;
                return Ok(Ty::plain(name));
            }
            return self.named(&name);
        }
        if let Some(c) = schema.get("const") {
            return match c {
                Value::String(s) => Ok(Ty::plain(self.consts.name_for(s)?).defaultable()),
                Value::Number(n) if n.is_i64() => {
                    Ok(Ty::plain(format!("crate::IntConst<{n}>")).defaultable())
                }
                other => Err(format!("{ctx}: unsupported const {other}").into()),
            };
        }
        if let Some(values) = schema.get("enum").and_then(Value::as_array) {
            let values: Vec<String> = values
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect();
            let name = self.inline_name(ctx, schema);
            if !self.items.contains_key(&name) {
                self.push_enum(&name, &doc_of(schema), &values);
            }
            return Ok(Ty::plain(name));
        }
        if let Some(arms) = schema.get("anyOf").and_then(Value::as_array) {
            let non_null: Vec<&Value> = arms
                .iter()
                .filter(|a| a.get("type").and_then(Value::as_str) != Some("null"))
                .collect();
            if non_null.len() < arms.len() {
                let inner = if non_null.len() == 1 {
                    self.ty(non_null[0], ctx)?
                } else {
                    let without: Vec<Value> = non_null.into_iter().cloned().collect();
                    self.ty(&serde_json::json!({ "anyOf": without }), ctx)?
                };
                return Ok(Ty {
                    nullable: true,
                    ..inner
                });
            }
            let name = self.inline_name(ctx, schema);
            if !self.items.contains_key(&name) && self.done.insert(name.clone()) {
                let arms = arms.clone();
                if arms.iter().all(|a| self.is_const_string(a)) {
                    let values: Vec<String> = arms
                        .iter()
                        .map(|a| a["const"].as_str().unwrap_or_default().to_owned())
                        .collect();
                    self.push_enum(&name, &doc_of(schema), &values);
                } else {
                    self.gen_union(&name, &doc_of(schema), &arms)?;
                }
            }
            return Ok(Ty::plain(name));
        }
        let types: Vec<&str> = match schema.get("type") {
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
            _ => vec![],
        };
        let nullable = types.contains(&"null");
        let types: Vec<&str> = types.into_iter().filter(|t| *t != "null").collect();
        let mut ty = match types.as_slice() {
            [] => Ty {
                any: true,
                ..Ty::plain("::serde_json::Value")
            },
            ["string"] => Ty::plain("::std::string::String").defaultable(),
            ["integer"] => Ty::plain("i64").defaultable(),
            ["number"] => Ty::plain("::serde_json::Number"),
            ["boolean"] => Ty::plain("bool").defaultable(),
            ["array"] => {
                let item = match schema.get("items") {
                    Some(items) => self.ty(items, &format!("{ctx}Item"))?,
                    None => Ty::plain("::serde_json::Value"),
                };
                let rust = if item.nullable {
                    format!("::std::vec::Vec<::core::option::Option<{}>>", item.rust)
                } else {
                    format!("::std::vec::Vec<{}>", item.rust)
                };
                Ty::plain(rust).defaultable()
            }
            ["object"] => self.object_ty(schema, ctx)?,
            _ => Ty {
                any: true,
                ..Ty::plain("::serde_json::Value")
            },
        };
        ty.nullable |= nullable;
        Ok(ty)
    }

    fn object_ty(&mut self, schema: &Value, ctx: &str) -> Result<Ty, Error> {
        let has_props = schema
            .get("properties")
            .and_then(Value::as_object)
            .is_some_and(|p| !p.is_empty());
        if has_props {
            let name = self.inline_name(ctx, schema);
            if !self.items.contains_key(&name) && !self.done.contains(&name) {
                self.done.insert(name.clone());
                self.taken.insert(name.clone());
                self.gen_struct(&name, &doc_of(schema), schema)?;
            }
            let mut ty = Ty::plain(name.clone());
            ty.default = self.defaultable.contains(&name);
            return Ok(ty);
        }
        match schema.get("additionalProperties") {
            Some(ap) if is_typed_schema(ap) => {
                let value = self.ty(ap, &format!("{ctx}Value"))?;
                Ok(Ty::plain(format!(
                    "::std::collections::BTreeMap<::std::string::String, {}>",
                    value.rust
                ))
                .defaultable())
            }
            _ => Ok(Ty::plain("crate::JsonObject").defaultable()),
        }
    }

    /// The name for an inline type at `ctx`: a definition with the same shape if there is one, the
    /// name an identical inline type already got, or `ctx` made unique.
    fn inline_name(&mut self, ctx: &str, schema: &Value) -> String {
        let key = canonical(schema);
        if let Some(name) = self.shapes.get(&key) {
            return name.clone();
        }
        let mut name = ctx.to_owned();
        let mut n = 2;
        while self.taken.contains(&name) {
            name = format!("{ctx}{n}");
            n += 1;
        }
        self.taken.insert(name.clone());
        self.shapes.insert(key, name.clone());
        name
    }

    fn push_enum(&mut self, name: &str, doc: &str, values: &[String]) {
        let doc = &doc_or_default(doc, name);
        let mut out = format!(
            "{doc}#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, \
             ::serde::Serialize, ::serde::Deserialize)]\npub enum {name} {{\n"
        );
        for value in values {
            let _ = writeln!(
                out,
                "    /// `{value}`\n    #[serde(rename = {})]\n    {},",
                rust_str(value),
                pascal(value)
            );
        }
        out.push_str("}\n\n");
        let _ = write!(
            out,
            "impl {name} {{\n    /// The wire string.\n    pub fn as_str(self) -> &'static str {{\n        match self {{\n"
        );
        for value in values {
            let _ = writeln!(
                out,
                "            {name}::{} => {},",
                pascal(value),
                rust_str(value)
            );
        }
        out.push_str("        }\n    }\n}\n");
        self.ir.insert(
            name.to_owned(),
            (
                Shape::Enum {
                    values: values.to_vec(),
                },
                doc.clone(),
            ),
        );
        self.items.insert(name.to_owned(), out);
        self.registry.insert(name.to_owned());
    }

    fn is_open(&self, name: &str, schema: &Value) -> bool {
        matches!(schema.get("additionalProperties"), Some(ap) if !is_typed_schema(ap) && ap != &Value::Bool(false))
            || name.ends_with("Result")
            || name.contains("Capabilities")
            || name.ends_with("MetaObject")
            || name.ends_with("Meta")
            || name.ends_with("InputSchema")
            || name.ends_with("OutputSchema")
            || name.ends_with("RequestedSchema")
    }

    fn gen_struct(&mut self, name: &str, doc: &str, schema: &Value) -> Result<(), Error> {
        let doc = &doc_or_default(doc, name);
        self.done.insert(name.to_owned());
        let props = schema
            .get("properties")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let required: BTreeSet<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut fields = String::new();
        let mut field_ir = Vec::new();
        let mut idents = BTreeSet::new();
        let mut all_default = true;
        for (prop, pschema) in &props {
            let ident = field_ident(prop);
            if !idents.insert(ident.clone()) {
                return Err(format!("{name}: two properties map to the field `{ident}`").into());
            }
            let ctx = if prop == "_meta" {
                meta_ctx(pschema)
            } else {
                format!("{name}{}", pascal(strip_prefix(prop)))
            };
            let is_required = required.contains(prop.as_str());
            let mut attrs = Vec::new();
            if unraw(&ident) != prop {
                attrs.push(format!("rename = {}", rust_str(prop)));
            }
            let ty = if prop == "resultType" {
                Ty::plain("crate::ResultType").defaultable()
            } else {
                self.ty(pschema, &ctx)?
            };
            let field_ty = if ty.any {
                if is_required {
                    ty.rust.clone()
                } else {
                    attrs.push(
                        "default, deserialize_with = \"crate::support::present\", \
                         skip_serializing_if = \"::core::option::Option::is_none\""
                            .into(),
                    );
                    format!("::core::option::Option<{}>", ty.rust)
                }
            } else if prop == "resultType" {
                attrs.push("default".into());
                ty.rust.clone()
            } else if is_required && !ty.nullable {
                all_default &= ty.default;
                ty.rust.clone()
            } else if is_required {
                attrs.push("default".into());
                format!("::core::option::Option<{}>", ty.rust)
            } else {
                attrs.push(
                    "default, skip_serializing_if = \"::core::option::Option::is_none\"".into(),
                );
                format!("::core::option::Option<{}>", ty.rust)
            };
            let fdoc = doc_of(pschema);
            let fdoc = if fdoc.is_empty() {
                format!("/// `{prop}`\n")
            } else {
                fdoc
            };
            let serde_attr = if attrs.is_empty() {
                String::new()
            } else {
                format!("#[serde({})]\n", attrs.join(", "))
            };
            let _ = writeln!(
                fields,
                "{}{serde_attr}pub {ident}: {field_ty},",
                indent(&fdoc)
            );
            field_ir.push(FieldIr {
                ident: ident.clone(),
                wire: prop.clone(),
                ty: field_ty,
                doc: fdoc,
            });
        }
        let open = self.is_open(name, schema);
        self.ir.insert(
            name.to_owned(),
            (
                Shape::Struct {
                    fields: field_ir,
                    open,
                },
                doc.clone(),
            ),
        );
        if open {
            if idents.contains("extra") {
                return Err(format!("{name}: a property is called `extra`").into());
            }
            fields.push_str(
                "/// Members this schema version does not define, kept as they came.\n\
                 #[serde(flatten)]\npub extra: crate::JsonObject,\n",
            );
        }
        let default = if all_default {
            self.defaultable.insert(name.to_owned());
            ", Default"
        } else {
            ""
        };
        let item = format!(
            "{doc}#[derive(Debug, Clone, PartialEq{default}, ::serde::Serialize, ::serde::Deserialize)]\n\
             pub struct {name} {{\n{fields}}}\n"
        );
        self.items.insert(name.to_owned(), item);
        self.registry.insert(name.to_owned());
        Ok(())
    }
}

/// The JSON types a schema names, `null` left out.
fn json_types(schema: &Value) -> Vec<&str> {
    match schema.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .filter(|t| *t != "null")
            .collect(),
        _ => vec![],
    }
}

/// A schema that constrains values (not `{}`, `true` or absent).
fn is_typed_schema(schema: &Value) -> bool {
    match schema {
        Value::Object(map) => map.keys().any(|k| k != "description"),
        _ => false,
    }
}

/// Merges two object schemas (`allOf`): properties are merged, the more specific wins, `required`
/// is the union.
fn merge(a: &Value, b: &Value) -> Value {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return b.clone();
    };
    let mut out = a.clone();
    for (key, value) in b {
        match (key.as_str(), out.get(key)) {
            ("properties", Some(Value::Object(existing))) => {
                let mut props = existing.clone();
                if let Some(new) = value.as_object() {
                    for (p, s) in new {
                        let merged = match props.get(p) {
                            Some(old)
                                if old.get("properties").is_some()
                                    && s.get("properties").is_some() =>
                            {
                                merge(old, s)
                            }
                            Some(old) if specificity(old) > specificity(s) => old.clone(),
                            _ => s.clone(),
                        };
                        props.insert(p.clone(), merged);
                    }
                }
                out.insert(key.clone(), Value::Object(props));
            }
            ("required", Some(Value::Array(existing))) => {
                let mut req = existing.clone();
                for r in value.as_array().into_iter().flatten() {
                    if !req.contains(r) {
                        req.push(r.clone());
                    }
                }
                out.insert(key.clone(), Value::Array(req));
            }
            ("description", Some(_)) => {}
            _ => {
                out.insert(key.clone(), value.clone());
            }
        }
    }
    Value::Object(out)
}

fn specificity(schema: &Value) -> usize {
    [
        "const",
        "$ref",
        "properties",
        "anyOf",
        "allOf",
        "enum",
        "items",
    ]
    .iter()
    .filter(|k| schema.get(**k).is_some())
    .count()
}

fn meta_ctx(schema: &Value) -> String {
    if schema
        .get("properties")
        .and_then(Value::as_object)
        .is_some_and(|p| !p.is_empty())
    {
        "RequestMeta".into()
    } else {
        "Meta".into()
    }
}
