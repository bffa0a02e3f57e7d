//! Generates the version-neutral model (`modelctx_types::model`) and its conversions to and from
//! every version module.
//!
//! The input is what the module generator recorded of each type it wrote ([`ModuleIr`]). Types
//! of different versions that stand for the same concept form one class: first by name, then by
//! position (the types of the same field of two members, the payloads of the same variant). Each
//! class becomes one model type:
//!
//! * structs get the union of the members' fields, required only where every member requires
//!   them; fields holding a fixed string (a `type` tag) are left out, the version types fill
//!   them back in;
//! * string enums get the union of the values; unions the union of the variants;
//! * a class whose members are of different kinds (a struct in one version, a union in
//!   another), and a field whose types differ in a way that has no mechanical mapping, are kept
//!   as raw JSON and converted through serde. The generator lists them.
//!
//! Conversions destructure every value without `..`, so the generated code names every field
//! and variant of both sides. Version to model is `From` (a newer model always holds an older
//! value); model to version is `TryFrom` and fails with `ConvertError` where the version cannot
//! express the value (a variant it lacks, a required field left empty, raw JSON of the wrong
//! shape). Fields the version lacks are dropped.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use super::ir::{ModuleIr, Shape};
use super::names::{PREAMBLE, pascal, rust_str};
use crate::schema::Error;

/// Older names of a concept, mapped to the name it has in the newest version that has it.
const RENAMES: &[(&str, &str)] = &[("ResourceReference", "ResourceTemplateReference")];

const ALLOWS: &str = "#![allow(rustdoc::broken_intra_doc_links, rustdoc::invalid_html_tags, \
    rustdoc::bare_urls)]\n#![allow(clippy::large_enum_variant, clippy::doc_lazy_continuation, \
    clippy::doc_overindented_list_items)]\n\n";

type Key = (usize, String);

/// A version type, parsed from its Rust spelling.
#[derive(Debug, Clone, PartialEq, Eq)]
enum VTy {
    Opt(Box<VTy>),
    Vec(Box<VTy>),
    Map(Box<VTy>),
    Local(Key),
    Ext(String),
    /// A fixed value (a `type` tag): a marker type with no data.
    Const(String),
}

/// A model type.
#[derive(Debug, Clone, PartialEq, Eq)]
enum NTy {
    Opt(Box<NTy>),
    Vec(Box<NTy>),
    Map(Box<NTy>),
    Class(usize),
    Ext(String),
    Json(&'static str),
}

const VALUE: &str = "::serde_json::Value";
const OBJECT: &str = "crate::JsonObject";

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Struct,
    Enum,
    Union,
    Mixed,
}

struct Classes<'a> {
    modules: &'a [ModuleIr],
    keys: Vec<Key>,
    index: BTreeMap<Key, usize>,
    parent: Vec<usize>,
}

impl<'a> Classes<'a> {
    fn new(modules: &'a [ModuleIr]) -> Self {
        let mut keys = Vec::new();
        for (i, m) in modules.iter().enumerate() {
            for (name, ty) in &m.types {
                if !matches!(ty.shape, Shape::Alias(_)) {
                    keys.push((i, name.clone()));
                }
            }
        }
        let index = keys
            .iter()
            .cloned()
            .enumerate()
            .map(|(n, k)| (k, n))
            .collect();
        let parent = (0..keys.len()).collect();
        Classes {
            modules,
            keys,
            index,
            parent,
        }
    }

    fn find(&mut self, mut n: usize) -> usize {
        while self.parent[n] != n {
            self.parent[n] = self.parent[self.parent[n]];
            n = self.parent[n];
        }
        n
    }

    fn union(&mut self, a: &Key, b: &Key) -> bool {
        let (Some(&a), Some(&b)) = (self.index.get(a), self.index.get(b)) else {
            return false;
        };
        let (ra, rb) = (self.find(a), self.find(b));
        if ra == rb {
            return false;
        }
        self.parent[ra.max(rb)] = ra.min(rb);
        true
    }

    /// Parses a Rust type of module `i`, following aliases and re-exports.
    fn parse(&self, i: usize, rust: &str) -> VTy {
        let rust = rust.trim();
        if let Some(inner) = generic(rust, "::core::option::Option<") {
            return VTy::Opt(Box::new(self.parse(i, inner)));
        }
        if let Some(inner) = generic(rust, "::std::vec::Vec<") {
            return VTy::Vec(Box::new(self.parse(i, inner)));
        }
        if let Some(inner) = generic(rust, "::std::collections::BTreeMap<::std::string::String, ") {
            return VTy::Map(Box::new(self.parse(i, inner)));
        }
        if rust.starts_with("crate::consts::") || rust.starts_with("crate::IntConst<") {
            return VTy::Const(rust.to_owned());
        }
        let m = &self.modules[i];
        if let Some(base) = m.reexports.get(rust)
            && let Some(b) = self.modules.iter().position(|x| &x.module == base)
        {
            return self.parse(b, rust);
        }
        match m.types.get(rust).map(|t| &t.shape) {
            Some(Shape::Alias(target)) => self.parse(i, target),
            Some(_) => VTy::Local((i, rust.to_owned())),
            None => VTy::Ext(rust.to_owned()),
        }
    }

    /// Unifies the classes of the local types in two version types of the same place.
    fn unify(&mut self, a: &VTy, b: &VTy) -> bool {
        match (strip_opt(a), strip_opt(b)) {
            (VTy::Vec(a), VTy::Vec(b)) | (VTy::Map(a), VTy::Map(b)) => {
                let (a, b) = (a.as_ref().clone(), b.as_ref().clone());
                self.unify(&a, &b)
            }
            // Two definitions are two concepts (renames aside, which are unified by name);
            // an inline type is the concept of the place it stands in.
            (VTy::Local(a), VTy::Local(b)) if !(self.is_def(a) && self.is_def(b)) => {
                let (a, b) = (a.clone(), b.clone());
                self.union(&a, &b)
            }
            _ => false,
        }
    }

    fn is_def(&self, key: &Key) -> bool {
        self.modules[key.0].types[&key.1].is_def
    }

    fn shape(&self, key: &Key) -> &'a Shape {
        &self.modules[key.0].types[&key.1].shape
    }
}

/// A closure over `x` with `body`, or the function itself when the body only calls one.
fn lam(body: String) -> String {
    match body.strip_suffix("(x)") {
        Some(f)
            if f == "::core::convert::From::from" || f == "::core::convert::TryFrom::try_from" =>
        {
            f.to_owned()
        }
        _ => format!("|x| {body}"),
    }
}

fn generic<'s>(rust: &'s str, open: &str) -> Option<&'s str> {
    rust.strip_prefix(open)?.strip_suffix('>')
}

fn strip_opt(t: &VTy) -> &VTy {
    match t {
        VTy::Opt(inner) => strip_opt(inner),
        other => other,
    }
}

fn kind_of(shape: &Shape) -> Kind {
    match shape {
        Shape::Struct { .. } => Kind::Struct,
        Shape::Enum { .. } => Kind::Enum,
        Shape::Union { .. } => Kind::Union,
        Shape::Alias(_) => Kind::Mixed,
    }
}

/// One model class.
struct Class {
    name: String,
    kind: Kind,
    /// Members, newest version first.
    members: Vec<Key>,
}

/// A model field and its type in every member.
struct NField {
    ident: String,
    wire: String,
    ty: NTy,
    doc: String,
}

/// A model struct's fields and whether it keeps unknown members.
type StructParts = (Vec<NField>, bool);
/// A model union's variant and its payload.
type VariantParts = (String, Option<NTy>);

/// The merged model of every version.
struct Model<'a> {
    c: Classes<'a>,
    classes: Vec<Class>,
    class_of: BTreeMap<Key, usize>,
    /// Places kept as raw JSON, for the report.
    json_places: BTreeSet<String>,
}

/// The generated files: (file name in the generated folder, code), and the lines for `mod.rs`.
pub(crate) fn generate(modules: &[ModuleIr]) -> Result<(Vec<(String, String)>, String), Error> {
    let mut c = Classes::new(modules);
    let renames: BTreeMap<&str, &str> = RENAMES.iter().copied().collect();
    // Same name (after renames) in every version: one class.
    let mut by_name: BTreeMap<String, Key> = BTreeMap::new();
    for key in c.keys.clone() {
        let name = renames
            .get(key.1.as_str())
            .copied()
            .unwrap_or(&key.1)
            .to_owned();
        match by_name.get(&name) {
            Some(first) => {
                let first = first.clone();
                c.union(&first, &key);
            }
            None => {
                by_name.insert(name, key);
            }
        }
    }
    // Then by position, until nothing changes.
    loop {
        let mut changed = false;
        let mut groups: BTreeMap<usize, Vec<Key>> = BTreeMap::new();
        for (n, key) in c.keys.clone().into_iter().enumerate() {
            let root = c.find(n);
            groups.entry(root).or_default().push(key);
        }
        for members in groups.values() {
            for a in members {
                for b in members {
                    if a >= b {
                        continue;
                    }
                    changed |= unify_members(&mut c, a, b);
                }
            }
        }
        if !changed {
            break;
        }
    }
    // Module priority: the core versions newest first, then the extensions.
    let mut priority: Vec<usize> = (0..modules.len())
        .filter(|&i| !modules[i].version.starts_with("ext-"))
        .rev()
        .collect();
    priority.extend((0..modules.len()).filter(|&i| modules[i].version.starts_with("ext-")));
    let rank = |i: usize| priority.iter().position(|&p| p == i).unwrap_or(usize::MAX);

    let mut groups: BTreeMap<usize, Vec<Key>> = BTreeMap::new();
    for (n, key) in c.keys.clone().into_iter().enumerate() {
        let root = c.find(n);
        groups.entry(root).or_default().push(key);
    }
    let mut classes = Vec::new();
    let mut class_of = BTreeMap::new();
    let mut taken = BTreeSet::new();
    let mut ordered: Vec<Vec<Key>> = groups.into_values().collect();
    for members in &mut ordered {
        members.sort_by_key(|k| {
            let t = &modules[k.0].types[&k.1];
            (!t.is_def, rank(k.0), k.1.clone())
        });
    }
    // Name defs first, so that an inline type never takes a definition's name.
    ordered.sort_by_key(|m| {
        let t = &modules[m[0].0].types[&m[0].1];
        (!t.is_def, m[0].1.clone())
    });
    for members in ordered {
        let kinds: BTreeSet<_> = members.iter().map(|k| kind_of(c.shape(k))).collect();
        let kind = if kinds.len() == 1 {
            kinds.into_iter().next().unwrap_or(Kind::Mixed)
        } else {
            Kind::Mixed
        };
        let base = renames
            .get(members[0].1.as_str())
            .copied()
            .unwrap_or(&members[0].1)
            .to_owned();
        let mut name = base.clone();
        let mut n = 2;
        while !taken.insert(name.clone()) {
            name = format!("{base}{n}");
            n += 1;
        }
        let id = classes.len();
        for k in &members {
            class_of.insert(k.clone(), id);
        }
        let mut members = members;
        members.sort_by_key(|k| (rank(k.0), k.1.clone()));
        classes.push(Class {
            name,
            kind,
            members,
        });
    }
    if std::env::var_os("MODELCTX_MODEL_DEBUG").is_some() {
        for class in &classes {
            let members: Vec<String> = class
                .members
                .iter()
                .map(|(i, n)| format!("{}::{n}", modules[*i].module))
                .collect();
            eprintln!("{} ({:?}): {}", class.name, class.kind, members.join(" "));
        }
    }
    let mut model = Model {
        c,
        classes,
        class_of,
        json_places: BTreeSet::new(),
    };
    model.render()
}

/// Unifies what two members of one class have in common; true when a class changed.
fn unify_members(c: &mut Classes<'_>, a: &Key, b: &Key) -> bool {
    let mut changed = false;
    match (c.shape(a), c.shape(b)) {
        (Shape::Struct { fields: fa, .. }, Shape::Struct { fields: fb, .. }) => {
            for f in fa {
                if let Some(g) = fb.iter().find(|g| g.wire == f.wire) {
                    let (ta, tb) = (c.parse(a.0, &f.ty), c.parse(b.0, &g.ty));
                    changed |= c.unify(&ta, &tb);
                }
            }
        }
        (Shape::Union { variants: va }, Shape::Union { variants: vb }) => {
            for (name, pa) in va {
                if let Some((_, Some(pb))) = vb.iter().find(|(n, _)| n == name)
                    && let Some(pa) = pa
                {
                    let (ta, tb) = (c.parse(a.0, pa), c.parse(b.0, pb));
                    changed |= c.unify(&ta, &tb);
                }
            }
        }
        _ => {}
    }
    changed
}

impl Model<'_> {
    fn module(&self, i: usize) -> &ModuleIr {
        &self.c.modules[i]
    }

    /// The model type of a version type (`Opt` kept).
    fn neutral(&self, t: &VTy) -> NTy {
        match t {
            VTy::Opt(t) => NTy::Opt(Box::new(self.neutral(t))),
            VTy::Vec(t) => NTy::Vec(Box::new(self.neutral(t))),
            VTy::Map(t) => NTy::Map(Box::new(self.neutral(t))),
            VTy::Local(k) => match self.class_of.get(k) {
                Some(&c) if self.classes[c].kind != Kind::Mixed => NTy::Class(c),
                Some(&c) if self.is_objects(c) => NTy::Json(OBJECT),
                _ => NTy::Json(VALUE),
            },
            VTy::Ext(s) => NTy::Ext(s.clone()),
            VTy::Const(s) => NTy::Ext(s.clone()),
        }
    }

    /// Every member of class `c` is a struct (so its JSON is always an object).
    fn is_objects(&self, c: usize) -> bool {
        self.classes[c]
            .members
            .iter()
            .all(|k| matches!(self.c.shape(k), Shape::Struct { .. }))
    }

    /// The model type for one place given its (non-optional) types in the members that have it.
    fn merge(&mut self, place: &str, types: &[VTy]) -> NTy {
        let neutral: Vec<NTy> = types.iter().map(|t| self.neutral(t)).collect();
        if neutral.windows(2).all(|w| w[0] == w[1])
            && let Some(first) = neutral.into_iter().next()
        {
            return first;
        }
        if !place.ends_with("._meta") {
            self.json_places.insert(place.to_owned());
        }
        let objects = types.iter().all(|t| match t {
            VTy::Ext(s) => s == OBJECT,
            VTy::Local(k) => matches!(self.c.shape(k), Shape::Struct { .. }),
            _ => false,
        });
        NTy::Json(if objects { OBJECT } else { VALUE })
    }

    fn render(&mut self) -> Result<(Vec<(String, String)>, String), Error> {
        let mut types_rs = format!(
            "{PREAMBLE}\n//! The version-neutral model: one type per concept, merged from every \
             protocol version.\n\n{ALLOWS}"
        );
        let mut fields_of: Vec<Option<StructParts>> = Vec::new();
        let mut variants_of: Vec<Vec<VariantParts>> = Vec::new();
        for id in 0..self.classes.len() {
            let (fields, variants) = self.merge_class(id);
            fields_of.push(fields);
            variants_of.push(variants);
        }
        for id in 0..self.classes.len() {
            let class = &self.classes[id];
            let first = &class.members[0];
            let doc = &self.module(first.0).types[&first.1].doc;
            let name = &class.name;
            let sources: Vec<String> = class
                .members
                .iter()
                .map(|(i, n)| format!("`{}::{n}`", self.module(*i).module))
                .collect();
            let doc = format!(
                "{}///\n/// Model of {}.\n",
                if doc.is_empty() {
                    format!("/// The `{name}` concept.\n")
                } else {
                    doc.clone()
                },
                sources.join(", ")
            );
            match class.kind {
                Kind::Mixed => {
                    let _ = writeln!(
                        types_rs,
                        "{doc}///\n/// Its shape differs between versions, so the model keeps its JSON.\n\
                         pub type {name} = {};\n",
                        if self.is_objects(id) { OBJECT } else { VALUE }
                    );
                }
                Kind::Struct => {
                    let (fields, open) = fields_of[id].as_ref().ok_or("struct without fields")?;
                    let _ = writeln!(
                        types_rs,
                        "{doc}#[derive(Debug, Clone, PartialEq)]\npub struct {name} {{"
                    );
                    for f in fields {
                        let _ = writeln!(
                            types_rs,
                            "{}pub {}: {},",
                            f.doc,
                            f.ident,
                            self.nty_str(&f.ty)
                        );
                    }
                    if *open {
                        types_rs.push_str(
                            "/// Members no version defines, kept as they came.\npub extra: crate::JsonObject,\n",
                        );
                    }
                    types_rs.push_str("}\n\n");
                }
                Kind::Enum => {
                    let mut values = Vec::new();
                    for k in &class.members {
                        if let Shape::Enum { values: vs } = self.c.shape(k) {
                            for v in vs {
                                if !values.contains(v) {
                                    values.push(v.clone());
                                }
                            }
                        }
                    }
                    let _ = writeln!(
                        types_rs,
                        "{doc}#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]\n\
                         #[non_exhaustive]\npub enum {name} {{"
                    );
                    for v in &values {
                        let _ = writeln!(types_rs, "/// `{v}`\n{},", pascal(v));
                    }
                    types_rs.push_str("}\n\n");
                }
                Kind::Union => {
                    let _ = writeln!(
                        types_rs,
                        "{doc}#[derive(Debug, Clone, PartialEq)]\n#[non_exhaustive]\npub enum {name} {{"
                    );
                    for (v, payload) in &variants_of[id] {
                        match payload {
                            Some(t) => {
                                let _ = writeln!(
                                    types_rs,
                                    "/// The `{v}` member.\n{v}({}),",
                                    self.nty_str(t)
                                );
                            }
                            None => {
                                let _ = writeln!(types_rs, "/// The `{v}` member.\n{v},");
                            }
                        }
                    }
                    types_rs.push_str("}\n\n");
                }
            }
        }
        // The places kept as JSON, for readers of the generated code.
        types_rs.push_str(
            "/// The places where versions disagree on a type in a way with no mechanical \
             mapping; the model keeps their JSON.\npub const JSON_PLACES: &[&str] = &[\n",
        );
        for p in &self.json_places {
            let _ = writeln!(types_rs, "    {},", rust_str(p));
        }
        types_rs.push_str("];\n\n");

        let mut files = Vec::new();
        let mut mod_lines = String::from("pub(crate) mod neutral;\n");
        let mut registry_arms = String::new();
        for i in 0..self.c.modules.len() {
            let code = self.render_conversions(i, &fields_of, &variants_of)?;
            let m = self.module(i);
            let file = format!("model_{}", m.module);
            let _ = writeln!(
                mod_lines,
                "#[cfg(feature = \"{}\")]\nmod {file};",
                m.feature
            );
            let _ = writeln!(
                registry_arms,
                "        #[cfg(feature = \"{}\")]\n        {} => crate::generated::{file}::__roundtrip(name, value),",
                m.feature,
                rust_str(&m.version)
            );
            files.push((format!("{file}.rs"), code));
        }
        let _ = write!(
            types_rs,
            "/// Decodes `value` as the type `name` of `version`, converts it to the model and back, \
             and encodes it again (for tests).\n#[cfg(feature = \"__registry\")]\n#[doc(hidden)]\n\
             pub fn __roundtrip(version: &str, name: &str, value: ::serde_json::Value) -> \
             ::core::option::Option<::core::result::Result<::serde_json::Value, ::std::string::String>> {{\n\
             let _ = (name, &value);\n    match version {{\n{registry_arms}        _ => ::core::option::Option::None,\n    }}\n}}\n"
        );
        files.push(("neutral.rs".to_owned(), types_rs));
        Ok((files, mod_lines))
    }

    /// The fields (struct) or variants (union) of class `id`.
    fn merge_class(&mut self, id: usize) -> (Option<StructParts>, Vec<VariantParts>) {
        let class_name = self.classes[id].name.clone();
        let members = self.classes[id].members.clone();
        match self.classes[id].kind {
            Kind::Struct => {
                let mut wires: Vec<String> = Vec::new();
                let mut open = false;
                for k in &members {
                    if let Shape::Struct { fields, open: o } = self.c.shape(k) {
                        open |= *o;
                        for f in fields {
                            if !wires.contains(&f.wire) {
                                wires.push(f.wire.clone());
                            }
                        }
                    }
                }
                let mut out = Vec::new();
                for wire in wires {
                    let mut types = Vec::new();
                    let mut required = true;
                    let mut first = None;
                    for k in &members {
                        let Shape::Struct { fields, .. } = self.c.shape(k) else {
                            continue;
                        };
                        match fields.iter().find(|f| f.wire == wire) {
                            Some(f) => {
                                let t = self.c.parse(k.0, &f.ty);
                                required &= !matches!(t, VTy::Opt(_));
                                types.push(strip_opt(&t).clone());
                                first.get_or_insert(f);
                            }
                            None => required = false,
                        }
                    }
                    let Some(first) = first else { continue };
                    // A required tag carries nothing; an optional one says whether it was sent.
                    if required && types.iter().all(|t| matches!(t, VTy::Const(_))) {
                        continue;
                    }
                    let ty = self.merge(&format!("{class_name}.{wire}"), &types);
                    let ty = if required { ty } else { NTy::Opt(Box::new(ty)) };
                    out.push(NField {
                        ident: first.ident.clone(),
                        wire,
                        ty,
                        doc: first.doc.clone(),
                    });
                }
                (Some((out, open)), Vec::new())
            }
            Kind::Union => {
                let mut names: Vec<String> = Vec::new();
                for k in &members {
                    if let Shape::Union { variants } = self.c.shape(k) {
                        for (v, _) in variants {
                            if !names.contains(v) {
                                names.push(v.clone());
                            }
                        }
                    }
                }
                let mut out = Vec::new();
                for v in names {
                    let mut types = Vec::new();
                    let mut optional = false;
                    for k in &members {
                        let Shape::Union { variants } = self.c.shape(k) else {
                            continue;
                        };
                        match variants.iter().find(|(n, _)| *n == v) {
                            Some((_, Some(p))) => {
                                let t = self.c.parse(k.0, p);
                                optional |= matches!(t, VTy::Opt(_));
                                types.push(strip_opt(&t).clone());
                            }
                            Some((_, None)) => optional = true,
                            None => {}
                        }
                    }
                    let payload = if types.is_empty() {
                        None
                    } else {
                        let t = self.merge(&format!("{class_name}::{v}"), &types);
                        Some(if optional { NTy::Opt(Box::new(t)) } else { t })
                    };
                    out.push((v, payload));
                }
                (None, out)
            }
            Kind::Enum | Kind::Mixed => (None, Vec::new()),
        }
    }

    fn nty_str(&self, t: &NTy) -> String {
        match t {
            NTy::Opt(t) => format!("::core::option::Option<{}>", self.nty_str(t)),
            NTy::Vec(t) => format!("::std::vec::Vec<{}>", self.nty_str(t)),
            NTy::Map(t) => format!(
                "::std::collections::BTreeMap<::std::string::String, {}>",
                self.nty_str(t)
            ),
            NTy::Class(c) => self.classes[*c].name.clone(),
            NTy::Ext(s) => s.clone(),
            NTy::Json(s) => (*s).to_owned(),
        }
    }

    /// True when the version type and the model type are the same Rust type.
    fn same(&self, v: &VTy, n: &NTy) -> bool {
        match (v, n) {
            (VTy::Opt(a), NTy::Opt(b))
            | (VTy::Vec(a), NTy::Vec(b))
            | (VTy::Map(a), NTy::Map(b)) => self.same(a, b),
            (VTy::Ext(a) | VTy::Const(a), NTy::Ext(b)) => a == b,
            (VTy::Ext(a), NTy::Json(b)) => a == b,
            _ => false,
        }
    }

    /// An expression converting `x` (version type `v`) into model type `n`.
    fn up(&self, x: &str, v: &VTy, n: &NTy) -> Result<String, Error> {
        if self.same(v, n) {
            return Ok(x.to_owned());
        }
        Ok(match (v, n) {
            (VTy::Opt(a), NTy::Opt(b)) => format!("{x}.map({})", lam(self.up("x", a, b)?)),
            (a, NTy::Opt(b)) => format!("::core::option::Option::Some({})", self.up(x, a, b)?),
            (VTy::Vec(a), NTy::Vec(b)) => {
                format!(
                    "{x}.into_iter().map({}).collect()",
                    lam(self.up("x", a, b)?)
                )
            }
            (VTy::Map(a), NTy::Map(b)) => format!(
                "{x}.into_iter().map(|(k, x)| (k, {})).collect()",
                self.up("x", a, b)?
            ),
            (VTy::Local(_), NTy::Class(_)) => format!("::core::convert::From::from({x})"),
            (_, NTy::Json(OBJECT)) => format!("crate::model::to_json_object(&{x})"),
            (_, NTy::Json(_)) => format!("crate::model::to_json_value(&{x})"),
            _ => return Err(format!("no conversion from {v:?} to {n:?}").into()),
        })
    }

    /// An expression converting `x` (model type `n`) into a `Result` of version type `v`.
    fn down(&self, x: &str, n: &NTy, v: &VTy, what: &str) -> Result<String, Error> {
        if self.same(v, n) {
            return Ok(format!("::core::result::Result::Ok({x})"));
        }
        let what_s = rust_str(what);
        Ok(match (n, v) {
            (NTy::Opt(a), VTy::Opt(b)) => {
                format!("{x}.map({}).transpose()", lam(self.down("x", a, b, what)?))
            }
            (NTy::Opt(a), b) => {
                let missing = format!(
                    "{x}.ok_or(crate::model::ConvertError::Missing {{ version: VERSION, what: {what_s} }})"
                );
                if self.same(b, a) {
                    missing
                } else {
                    format!("{missing}.and_then({})", lam(self.down("x", a, b, what)?))
                }
            }
            (a, VTy::Opt(b)) if self.same(b, a) => {
                format!("::core::result::Result::Ok(::core::option::Option::Some({x}))")
            }
            (a, VTy::Opt(b)) => format!(
                "{}.map(::core::option::Option::Some)",
                self.down(x, a, b, what)?
            ),
            (NTy::Vec(a), VTy::Vec(b)) => format!(
                "{x}.into_iter().map({}).collect::<::core::result::Result<_, crate::model::ConvertError>>()",
                lam(self.down("x", a, b, what)?)
            ),
            (NTy::Map(a), VTy::Map(b)) => format!(
                "{x}.into_iter().map(|(k, x)| {}.map(|x| (k, x))).collect::<::core::result::Result<_, crate::model::ConvertError>>()",
                self.down("x", a, b, what)?
            ),
            (NTy::Class(_), VTy::Local(_)) => format!("::core::convert::TryFrom::try_from({x})"),
            (NTy::Json(_), _) => {
                format!("crate::model::from_json({x}, VERSION, {what_s})")
            }
            _ => return Err(format!("no conversion from {n:?} to {v:?}").into()),
        })
    }

    fn render_conversions(
        &self,
        i: usize,
        fields_of: &[Option<StructParts>],
        variants_of: &[Vec<VariantParts>],
    ) -> Result<String, Error> {
        let m = self.module(i);
        let mut out = format!(
            "{PREAMBLE}\n//! Conversions between the model and the wire types of {}.\n\n{ALLOWS}\
             use crate::model as n;\nuse crate::{} as v;\n\nconst VERSION: &str = {};\n\n",
            m.version,
            m.module,
            rust_str(&m.version)
        );
        let mut registry = Vec::new();
        for (id, class) in self.classes.iter().enumerate() {
            if class.kind == Kind::Mixed {
                continue;
            }
            let nname = &class.name;
            for key in class.members.iter().filter(|k| k.0 == i) {
                let vname = &key.1;
                if m.types[vname].registered {
                    registry.push((vname.clone(), nname.clone()));
                }
                match self.c.shape(key) {
                    Shape::Struct { fields, open } => {
                        let (nfields, nopen) = fields_of[id]
                            .as_ref()
                            .ok_or("struct class without fields")?;
                        // Version -> model.
                        let mut pat = Vec::new();
                        for f in fields {
                            if nfields.iter().any(|g| g.wire == f.wire) {
                                pat.push(f.ident.clone());
                            } else {
                                pat.push(format!("{}: _", f.ident));
                            }
                        }
                        if *open {
                            pat.push("extra".into());
                        }
                        let mut build = Vec::new();
                        for g in nfields {
                            match fields.iter().find(|f| f.wire == g.wire) {
                                Some(f) => {
                                    let vt = self.c.parse(i, &f.ty);
                                    let e = self.up(&f.ident, &vt, &g.ty)?;
                                    build.push(if e == g.ident {
                                        e
                                    } else {
                                        format!("{}: {e}", g.ident)
                                    });
                                }
                                None => {
                                    build.push(format!("{}: ::core::option::Option::None", g.ident))
                                }
                            }
                        }
                        if *nopen {
                            build.push(if *open {
                                "extra".into()
                            } else {
                                "extra: ::core::default::Default::default()".into()
                            });
                        }
                        let _ = writeln!(
                            out,
                            "impl ::core::convert::From<v::{vname}> for n::{nname} {{\n\
                             fn from(value: v::{vname}) -> Self {{\n\
                             let v::{vname} {{ {} }} = value;\n\
                             n::{nname} {{ {} }}\n}}\n}}\n",
                            pat.join(", "),
                            build.join(", ")
                        );
                        // Model -> version.
                        let mut pat = Vec::new();
                        let mut dropped = Vec::new();
                        for g in nfields {
                            pat.push(g.ident.clone());
                            if !fields.iter().any(|f| f.wire == g.wire) {
                                dropped.push(g.ident.clone());
                            }
                        }
                        if *nopen {
                            pat.push("extra".into());
                            if !*open {
                                dropped.push("extra".into());
                            }
                        }
                        let mut build = Vec::new();
                        for f in fields {
                            let vt = self.c.parse(i, &f.ty);
                            let g = nfields.iter().find(|g| g.wire == f.wire);
                            if let (VTy::Const(_), Some(g)) = (&vt, g) {
                                // A tag this version requires is always its one value.
                                dropped.push(g.ident.clone());
                            }
                            match g.filter(|_| !matches!(vt, VTy::Const(_))) {
                                Some(g) if self.same(&vt, &g.ty) => build.push(f.ident.clone()),
                                Some(g) => build.push(format!(
                                    "{}: {}?",
                                    f.ident,
                                    self.down(
                                        &g.ident,
                                        &g.ty,
                                        &vt,
                                        &format!("{nname}.{}", f.wire)
                                    )?
                                )),
                                None => build.push(format!(
                                    "{}: ::core::default::Default::default()",
                                    f.ident
                                )),
                            }
                        }
                        if *open {
                            build.push("extra".into());
                        }
                        let drop = if dropped.is_empty() {
                            String::new()
                        } else {
                            format!(
                                "// Not in this version.\nlet _ = ({},);\n",
                                dropped.join(", ")
                            )
                        };
                        let _ = writeln!(
                            out,
                            "impl ::core::convert::TryFrom<n::{nname}> for v::{vname} {{\n\
                             type Error = crate::model::ConvertError;\n\
                             fn try_from(value: n::{nname}) -> ::core::result::Result<Self, crate::model::ConvertError> {{\n\
                             let n::{nname} {{ {} }} = value;\n{drop}\
                             ::core::result::Result::Ok(v::{vname} {{ {} }})\n}}\n}}\n",
                            pat.join(", "),
                            build.join(", ")
                        );
                    }
                    Shape::Enum { values } => {
                        let mut all = Vec::new();
                        for k in &class.members {
                            if let Shape::Enum { values: vs } = self.c.shape(k) {
                                for v in vs {
                                    if !all.contains(v) {
                                        all.push(v.clone());
                                    }
                                }
                            }
                        }
                        let arms_up: Vec<String> = values
                            .iter()
                            .map(|x| format!("v::{vname}::{0} => n::{nname}::{0},", pascal(x)))
                            .collect();
                        let arms_down: Vec<String> = all
                            .iter()
                            .map(|x| {
                                if values.contains(x) {
                                    format!(
                                        "n::{nname}::{0} => ::core::result::Result::Ok(v::{vname}::{0}),",
                                        pascal(x)
                                    )
                                } else {
                                    format!(
                                        "n::{nname}::{0} => ::core::result::Result::Err(crate::model::ConvertError::Unsupported {{ version: VERSION, what: {1} }}),",
                                        pascal(x),
                                        rust_str(&format!("{nname} `{x}`"))
                                    )
                                }
                            })
                            .collect();
                        let _ = writeln!(
                            out,
                            "impl ::core::convert::From<v::{vname}> for n::{nname} {{\n\
                             fn from(value: v::{vname}) -> Self {{\nmatch value {{\n{}\n}}\n}}\n}}\n\n\
                             impl ::core::convert::TryFrom<n::{nname}> for v::{vname} {{\n\
                             type Error = crate::model::ConvertError;\n\
                             fn try_from(value: n::{nname}) -> ::core::result::Result<Self, crate::model::ConvertError> {{\n\
                             match value {{\n{}\n}}\n}}\n}}\n",
                            arms_up.join("\n"),
                            arms_down.join("\n")
                        );
                    }
                    Shape::Union { variants } => {
                        let nvariants = &variants_of[id];
                        let mut arms_up = Vec::new();
                        for (vv, payload) in variants {
                            let np = nvariants
                                .iter()
                                .find(|(n, _)| n == vv)
                                .map(|(_, p)| p.clone())
                                .ok_or("variant missing from the model")?;
                            arms_up.push(match (payload, np) {
                                (None, None) => format!("v::{vname}::{vv} => n::{nname}::{vv},"),
                                (None, Some(_)) => format!(
                                    "v::{vname}::{vv} => n::{nname}::{vv}(::core::option::Option::None),"
                                ),
                                (Some(p), Some(nt)) => format!(
                                    "v::{vname}::{vv}(x) => n::{nname}::{vv}({}),",
                                    self.up("x", &self.c.parse(i, p), &nt)?
                                ),
                                (Some(_), None) => {
                                    return Err("a payload the model lacks".into());
                                }
                            });
                        }
                        let mut arms_down = Vec::new();
                        for (nv, np) in nvariants {
                            let vp = variants.iter().find(|(n, _)| n == nv).map(|(_, p)| p);
                            arms_down.push(match (np, vp) {
                                (_, None) => format!(
                                    "n::{nname}::{nv} {{ .. }} => ::core::result::Result::Err(crate::model::ConvertError::Unsupported {{ version: VERSION, what: {} }}),",
                                    rust_str(&format!("{nname}::{nv}"))
                                ),
                                (None, Some(None)) => format!(
                                    "n::{nname}::{nv} => ::core::result::Result::Ok(v::{vname}::{nv}),"
                                ),
                                (Some(_), Some(None)) => format!(
                                    "n::{nname}::{nv}(_) => ::core::result::Result::Ok(v::{vname}::{nv}),"
                                ),
                                (Some(nt), Some(Some(p))) => format!(
                                    "n::{nname}::{nv}(x) => ::core::result::Result::Ok(v::{vname}::{nv}({}?)),",
                                    self.down("x", nt, &self.c.parse(i, p), &format!("{nname}::{nv}"))?
                                ),
                                (None, Some(Some(_))) => {
                                    return Err("a payload the model lacks".into());
                                }
                            });
                        }
                        let _ = writeln!(
                            out,
                            "impl ::core::convert::From<v::{vname}> for n::{nname} {{\n\
                             fn from(value: v::{vname}) -> Self {{\nmatch value {{\n{}\n}}\n}}\n}}\n\n\
                             impl ::core::convert::TryFrom<n::{nname}> for v::{vname} {{\n\
                             type Error = crate::model::ConvertError;\n\
                             fn try_from(value: n::{nname}) -> ::core::result::Result<Self, crate::model::ConvertError> {{\n\
                             match value {{\n{}\n}}\n}}\n}}\n",
                            arms_up.join("\n"),
                            arms_down.join("\n")
                        );
                    }
                    Shape::Alias(_) => {}
                }
            }
        }
        let _ = write!(
            out,
            "/// Decodes `value` as the type `name`, converts it to the model and back, and encodes it again.\n\
             #[cfg(feature = \"__registry\")]\n\
             pub(crate) fn __roundtrip(name: &str, value: ::serde_json::Value) -> \
             ::core::option::Option<::core::result::Result<::serde_json::Value, ::std::string::String>> {{\n\
             fn rt<T, N>(value: ::serde_json::Value) -> ::core::result::Result<::serde_json::Value, ::std::string::String>\n\
             where T: ::serde::de::DeserializeOwned + ::serde::Serialize + ::core::convert::TryFrom<N, Error = crate::model::ConvertError>,\n\
             N: ::core::convert::From<T>,\n{{\n\
             let wire: T = ::serde_json::from_value(value).map_err(|e| e.to_string())?;\n\
             let back = T::try_from(N::from(wire)).map_err(|e| e.to_string())?;\n\
             ::serde_json::to_value(back).map_err(|e| e.to_string())\n}}\n\
             ::core::option::Option::Some(match name {{\n"
        );
        for (vname, nname) in &registry {
            let _ = writeln!(
                out,
                "    {} => rt::<v::{vname}, n::{nname}>(value),",
                rust_str(vname)
            );
        }
        out.push_str("    _ => return ::core::option::Option::None,\n})\n}\n");
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codegen::ir::{FieldIr, TypeIr};

    fn field(wire: &str, ty: &str) -> FieldIr {
        FieldIr {
            ident: wire.to_owned(),
            wire: wire.to_owned(),
            ty: ty.to_owned(),
            doc: format!("/// `{wire}`\n"),
        }
    }

    fn module(version: &str, types: Vec<(&str, Shape, bool)>) -> ModuleIr {
        ModuleIr {
            version: version.to_owned(),
            module: format!("v{}", version.replace('-', "_")),
            feature: format!("v{version}"),
            types: types
                .into_iter()
                .map(|(name, shape, is_def)| {
                    let ir = TypeIr {
                        shape,
                        doc: String::new(),
                        is_def,
                        registered: true,
                    };
                    (name.to_owned(), ir)
                })
                .collect(),
            method_unions: BTreeMap::new(),
            reexports: BTreeMap::new(),
        }
    }

    /// Two versions of one concept: a field added, an inline type named differently, a tag, a
    /// variant only the newer union has.
    fn two_versions() -> Vec<ModuleIr> {
        let opt = |t: &str| format!("::core::option::Option<{t}>");
        let old = module(
            "1",
            vec![
                (
                    "Tool",
                    Shape::Struct {
                        fields: vec![
                            field("name", "::std::string::String"),
                            field("type", "crate::consts::Tool"),
                            field("hints", &opt("ToolHintsOld")),
                        ],
                        open: false,
                    },
                    true,
                ),
                (
                    "ToolHintsOld",
                    Shape::Struct {
                        fields: vec![field("fast", &opt("bool"))],
                        open: false,
                    },
                    false,
                ),
                (
                    "Block",
                    Shape::Union {
                        variants: vec![("Text".into(), Some("Tool".into()))],
                    },
                    true,
                ),
            ],
        );
        let new = module(
            "2",
            vec![
                (
                    "Tool",
                    Shape::Struct {
                        fields: vec![
                            field("name", "::std::string::String"),
                            field("type", "crate::consts::Tool"),
                            field("title", &opt("::std::string::String")),
                            field("hints", &opt("ToolHints")),
                        ],
                        open: true,
                    },
                    true,
                ),
                (
                    "ToolHints",
                    Shape::Struct {
                        fields: vec![field("fast", &opt("bool"))],
                        open: false,
                    },
                    false,
                ),
                (
                    "Block",
                    Shape::Union {
                        variants: vec![
                            ("Text".into(), Some("Tool".into())),
                            ("Audio".into(), Some("bool".into())),
                        ],
                    },
                    true,
                ),
            ],
        );
        vec![old, new]
    }

    fn squash(code: &str) -> String {
        code.split_whitespace().collect::<Vec<_>>().join(" ")
    }

    #[test]
    fn versions_merge_into_one_model_type_per_concept() {
        let (files, mods) = generate(&two_versions()).unwrap();
        let model = squash(&files.iter().find(|(f, _)| f == "neutral.rs").unwrap().1);
        // Union of the fields; the tag left out; the field only the new version has optional; the
        // inline types of both versions one class, named after the newest.
        assert!(model.contains("pub struct Tool {"), "{model}");
        assert!(model.contains("pub name: ::std::string::String,"));
        assert!(model.contains("pub title: ::core::option::Option<::std::string::String>,"));
        assert!(model.contains("pub hints: ::core::option::Option<ToolHints>,"));
        assert!(!model.contains("pub r#type") && !model.contains("pub type:"));
        assert!(model.contains("pub extra: crate::JsonObject,"));
        assert!(!model.contains("pub struct ToolHintsOld"));
        assert!(model.contains("Text(Tool),") && model.contains("Audio(bool),"));
        assert!(mods.contains("mod model_v1;") && mods.contains("mod model_v2;"));
    }

    #[test]
    fn conversions_name_every_field_and_refuse_what_a_version_lacks() {
        let (files, _) = generate(&two_versions()).unwrap();
        let old = squash(&files.iter().find(|(f, _)| f == "model_v1.rs").unwrap().1);
        // Destructured without `..`; the tag bound to `_`; the title the old version lacks
        // dropped on the way down and `None` on the way up.
        assert!(
            old.contains("let v::Tool { name, type: _, hints } = value;"),
            "{old}"
        );
        assert!(old.contains("title: ::core::option::Option::None"));
        assert!(old.contains("let n::Tool { name, title, hints, extra } = value;"));
        assert!(old.contains("let _ = (title, extra,);"));
        assert!(old.contains("type: ::core::default::Default::default()"));
        assert!(old.contains("n::Block::Audio { .. } => ::core::result::Result::Err(crate::model::ConvertError::Unsupported"));
    }

    #[test]
    fn generic_strips_one_layer() {
        assert_eq!(
            generic(
                "::core::option::Option<::std::vec::Vec<X>>",
                "::core::option::Option<"
            ),
            Some("::std::vec::Vec<X>")
        );
        assert_eq!(generic("X", "::core::option::Option<"), None);
    }
}
