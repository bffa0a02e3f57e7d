//! Unions not dispatched on `method`: by a shared tag, by key presence, by the rules of
//! `schema/overrides.toml`, or scalar unions.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde_json::Value;

use super::*;

impl Module<'_> {
    /// A union that is not dispatched on `method`.
    pub(super) fn gen_union(&mut self, name: &str, doc: &str, arms: &[Value]) -> Result<(), Error> {
        let doc = &doc_or_default(doc, name);
        // Resolve the members: (variant name, type, schema).
        struct Member {
            variant: String,
            rust: String,
            schema: Value,
            def: Option<String>,
        }
        if self.is_scalar_union(arms)? {
            return self.gen_scalar_union(name, doc, arms);
        }
        let mut object_arms: Vec<(Option<String>, Value)> = Vec::new();
        let mut array_arm: Option<Value> = None;
        for arm in arms {
            let def = arm
                .get("$ref")
                .and_then(Value::as_str)
                .map(|r| self.ref_name(r).map(str::to_owned))
                .transpose()?;
            let resolved = self.resolve_all_of(self.deref(arm)?)?;
            if resolved.get("type").and_then(Value::as_str) == Some("array") {
                if array_arm.is_some() {
                    return Err(format!("{name}: two array members").into());
                }
                array_arm = Some(arm.clone());
                continue;
            }
            if resolved.get("anyOf").is_some() {
                // A member that is itself a union (2025-06-18 EnumSchema is not; keep it simple).
                return Err(format!("{name}: nested union member {def:?}").into());
            }
            if resolved.get("type").and_then(Value::as_str) != Some("object") {
                return Err(format!("{name}: member {arm} is not an object").into());
            }
            object_arms.push((def, resolved));
        }
        let dispatch = self.dispatch_for(name, &object_arms)?;
        let mut members = Vec::new();
        for (i, (def, schema)) in object_arms.iter().enumerate() {
            let (variant, rust) = match def {
                Some(def) => (def.clone(), self.named(def)?.rust),
                None => {
                    let variant = match &dispatch {
                        Dispatch::Tag { key, values, .. } => {
                            pascal(&values[i].clone().unwrap_or_else(|| key.clone()))
                        }
                        _ => format!("Variant{i}"),
                    };
                    let ctx = format!("{name}{variant}");
                    (variant, self.ty(schema, &ctx)?.rust)
                }
            };
            members.push(Member {
                variant,
                rust,
                schema: schema.clone(),
                def: def.clone(),
            });
        }
        let mut out = format!(
            "{doc}#[derive(Debug, Clone, PartialEq, ::serde::Serialize)]\n#[serde(untagged)]\npub enum {name} {{\n"
        );
        for m in &members {
            let _ = writeln!(
                out,
                "    /// A [`{}`].\n    {}({}),",
                m.rust, m.variant, m.rust
            );
        }
        let mut ir_variants: Vec<(String, Option<String>)> = members
            .iter()
            .map(|m| (m.variant.clone(), Some(m.rust.clone())))
            .collect();
        let array_ty = match &array_arm {
            Some(arm) => {
                let ty = self.ty(arm, &format!("{name}Many"))?;
                out.push_str(&format!(
                    "    /// Several blocks.\n    Many({}),\n",
                    ty.rust
                ));
                ir_variants.push(("Many".into(), Some(ty.rust.clone())));
                Some(ty.rust)
            }
            None => None,
        };
        self.ir.insert(
            name.to_owned(),
            (
                Shape::Union {
                    variants: ir_variants,
                },
                doc.clone(),
            ),
        );
        out.push_str("}\n\n");
        // Deserialize: buffer the value, pick the member, decode it.
        let _ = write!(
            out,
            "impl<'de> ::serde::Deserialize<'de> for {name} {{\n    fn deserialize<D: ::serde::Deserializer<'de>>(deserializer: D) -> ::core::result::Result<Self, D::Error> {{\n\
             let value = <::serde_json::Value as ::serde::Deserialize>::deserialize(deserializer)?;\n"
        );
        if array_ty.is_some() {
            let _ = writeln!(
                out,
                "if value.is_array() {{ return crate::support::arm(value).map({name}::Many); }}"
            );
        }
        let _ = writeln!(
            out,
            "if !value.is_object() {{ return ::core::result::Result::Err(<D::Error as ::serde::de::Error>::custom(\"{name} must be a JSON object\")); }}"
        );
        match &dispatch {
            Dispatch::Tag {
                key,
                values,
                default,
            } => {
                let _ = writeln!(
                    out,
                    "match crate::support::str_at(&value, &[{}]) {{",
                    rust_str(key)
                );
                for (i, m) in members.iter().enumerate() {
                    if let Some(v) = &values[i] {
                        let _ = writeln!(
                            out,
                            "::core::option::Option::Some({}) => crate::support::arm(value).map({name}::{}),",
                            rust_str(v),
                            m.variant
                        );
                    }
                    if let Some(Some(extra)) = self
                        .tag_alternatives(&m.schema, key)
                        .map(|alts| if alts.len() > 1 { Some(alts) } else { None })
                    {
                        for alt in extra {
                            if values[i].as_deref() != Some(alt.as_str()) {
                                let _ = writeln!(
                                    out,
                                    "::core::option::Option::Some({}) => crate::support::arm(value).map({name}::{}),",
                                    rust_str(&alt),
                                    m.variant
                                );
                            }
                        }
                    }
                }
                if let Some(d) = default {
                    let _ = writeln!(
                        out,
                        "::core::option::Option::None => crate::support::arm(value).map({name}::{}),",
                        members[*d].variant
                    );
                }
                let expected: Vec<String> = values.iter().flatten().cloned().collect();
                let _ = writeln!(
                    out,
                    "other => ::core::result::Result::Err(<D::Error as ::serde::de::Error>::custom(format_args!(\"{name}: unknown `{key}` {{other:?}} (expected one of {})\"))),\n}}",
                    expected.join(", ")
                );
            }
            Dispatch::Keys { keys, default } => {
                for (i, m) in members.iter().enumerate() {
                    if let Some(k) = &keys[i] {
                        let _ = writeln!(
                            out,
                            "if crate::support::at(&value, &[{}]).is_some() {{ return crate::support::arm(value).map({name}::{}); }}",
                            rust_str(k),
                            m.variant
                        );
                    }
                }
                match default {
                    Some(d) => {
                        let _ = writeln!(
                            out,
                            "crate::support::arm(value).map({name}::{})",
                            members[*d].variant
                        );
                    }
                    None => {
                        let _ = writeln!(
                            out,
                            "::core::result::Result::Err(<D::Error as ::serde::de::Error>::custom(\"{name}: the object has none of the keys that identify a member ({})\"))",
                            keys.iter()
                                .flatten()
                                .cloned()
                                .collect::<Vec<_>>()
                                .join(", ")
                        );
                    }
                }
            }
            Dispatch::Rules(rules) => {
                for (member, is, has) in rules {
                    let Some(m) = members
                        .iter()
                        .find(|m| m.def.as_deref() == Some(member.as_str()))
                    else {
                        continue;
                    };
                    let mut conds = Vec::new();
                    for (path, value) in is {
                        let segs: Vec<String> = path.split('/').map(rust_str).collect();
                        conds.push(format!("crate::support::str_at(&value, &[{}]) == ::core::option::Option::Some({})", segs.join(", "), rust_str(value)));
                    }
                    for path in has {
                        let segs: Vec<String> = path.split('/').map(rust_str).collect();
                        conds.push(format!(
                            "crate::support::at(&value, &[{}]).is_some()",
                            segs.join(", ")
                        ));
                    }
                    let cond = if conds.is_empty() {
                        "true".to_owned()
                    } else {
                        conds.join(" && ")
                    };
                    let _ = writeln!(
                        out,
                        "if {cond} {{ return crate::support::arm(value).map({name}::{}); }}",
                        m.variant
                    );
                }
                let _ = writeln!(
                    out,
                    "::core::result::Result::Err(<D::Error as ::serde::de::Error>::custom(\"{name}: the object matches no member\"))"
                );
            }
        }
        out.push_str("    }\n}\n");
        self.items.insert(name.to_owned(), out);
        self.registry.insert(name.to_owned());
        Ok(())
    }

    /// No member is an object: the members are told apart by the kind of JSON value.
    fn is_scalar_union(&self, arms: &[Value]) -> Result<bool, Error> {
        for arm in arms {
            let resolved = self.deref(arm)?;
            let types = json_types(resolved);
            if types.is_empty() || types.contains(&"object") || resolved.get("anyOf").is_some() {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn gen_scalar_union(&mut self, name: &str, doc: &str, arms: &[Value]) -> Result<(), Error> {
        let doc = &doc_or_default(doc, name);
        let mut kinds: BTreeMap<&'static str, String> = BTreeMap::new();
        for arm in arms {
            let resolved = self.deref(arm)?.clone();
            for t in json_types(&resolved) {
                let (variant, rust) = match t {
                    "string" => ("String", "::std::string::String".to_owned()),
                    "boolean" => ("Boolean", "bool".to_owned()),
                    "integer" if !kinds.contains_key("Number") => ("Integer", "i64".to_owned()),
                    "integer" | "number" => {
                        kinds.remove("Integer");
                        ("Number", "::serde_json::Number".to_owned())
                    }
                    "array" => ("Array", self.ty(&resolved, &format!("{name}Array"))?.rust),
                    other => return Err(format!("{name}: unsupported member type {other}").into()),
                };
                kinds.insert(variant, rust);
            }
        }
        if kinds.contains_key("Number") {
            kinds.remove("Integer");
        }
        let mut out = format!(
            "{doc}///\n/// Told apart by the kind of JSON value, which differs for every member.\n\
             #[derive(Debug, Clone, PartialEq, ::serde::Serialize, ::serde::Deserialize)]\n#[serde(untagged)]\npub enum {name} {{\n"
        );
        for (variant, rust) in &kinds {
            let _ = writeln!(
                out,
                "    /// A JSON {}.\n    {variant}({rust}),",
                variant.to_lowercase()
            );
        }
        self.ir.insert(
            name.to_owned(),
            (
                Shape::Union {
                    variants: kinds
                        .iter()
                        .map(|(v, r)| ((*v).to_owned(), Some(r.clone())))
                        .collect(),
                },
                doc.clone(),
            ),
        );
        out.push_str("}\n");
        self.items.insert(name.to_owned(), out);
        self.registry.insert(name.to_owned());
        Ok(())
    }

    /// The const or enum values a member allows for `key`.
    fn tag_alternatives(&self, schema: &Value, key: &str) -> Option<Vec<String>> {
        let prop = schema.pointer(&format!("/properties/{key}"))?;
        if let Some(c) = prop.get("const").and_then(Value::as_str) {
            return Some(vec![c.to_owned()]);
        }
        prop.get("enum").and_then(Value::as_array).map(|v| {
            v.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
    }

    fn dispatch_for(
        &self,
        name: &str,
        arms: &[(Option<String>, Value)],
    ) -> Result<Dispatch, Error> {
        if let Some(o) = self
            .overrides
            .unions
            .iter()
            .find(|u| u.names.iter().any(|n| n == name))
        {
            let present: BTreeSet<&str> = arms.iter().filter_map(|(d, _)| d.as_deref()).collect();
            for (d, _) in arms {
                let d = d
                    .as_deref()
                    .ok_or_else(|| format!("{name}: rules need named members"))?;
                if !o.rules.iter().any(|r| r.member == d) {
                    return Err(format!(
                        "{name}: schema/overrides.toml has no rule for member {d}"
                    )
                    .into());
                }
            }
            let rules = o
                .rules
                .iter()
                .filter(|r| present.contains(r.member.as_str()))
                .map(|r| (r.member.clone(), r.is.clone(), r.has.clone()))
                .collect();
            return Ok(Dispatch::Rules(rules));
        }
        // A shared const tag.
        let mut candidates: Option<BTreeSet<String>> = None;
        for (_, schema) in arms {
            let keys: BTreeSet<String> = schema
                .get("properties")
                .and_then(Value::as_object)
                .map(|p| {
                    p.iter()
                        .filter(|(_, v)| v.get("const").is_some_and(Value::is_string))
                        .map(|(k, _)| k.clone())
                        .collect()
                })
                .unwrap_or_default();
            candidates = Some(match candidates {
                None => keys,
                Some(c) => c.intersection(&keys).cloned().collect(),
            });
        }
        for key in candidates.unwrap_or_default() {
            let values: Vec<Option<String>> = arms
                .iter()
                .map(|(_, s)| {
                    s.pointer(&format!("/properties/{key}/const"))
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                })
                .collect();
            let distinct: BTreeSet<&String> = values.iter().flatten().collect();
            if distinct.len() != arms.len() {
                continue;
            }
            let optional: Vec<usize> = arms
                .iter()
                .enumerate()
                .filter(|(_, (_, s))| {
                    !s.get("required")
                        .and_then(Value::as_array)
                        .is_some_and(|r| r.iter().any(|x| x == key.as_str()))
                })
                .map(|(i, _)| i)
                .collect();
            if optional.len() > 1 {
                continue;
            }
            return Ok(Dispatch::Tag {
                key,
                values,
                default: optional.first().copied(),
            });
        }
        // Key presence: each member has a required key that no other member declares.
        let mut keys = Vec::new();
        for (i, (_, schema)) in arms.iter().enumerate() {
            let required: Vec<&str> = schema
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let unique = required.into_iter().find(|k| {
                arms.iter().enumerate().all(|(j, (_, other))| {
                    j == i || other.pointer(&format!("/properties/{k}")).is_none()
                })
            });
            keys.push(unique.map(str::to_owned));
        }
        let missing: Vec<usize> = keys
            .iter()
            .enumerate()
            .filter(|(_, k)| k.is_none())
            .map(|(i, _)| i)
            .collect();
        if missing.len() <= 1 {
            return Ok(Dispatch::Keys {
                keys,
                default: missing.first().copied(),
            });
        }
        Err(format!(
            "{name}: no const tag or unique required key separates the members {:?}; add a rule to schema/overrides.toml",
            arms.iter().map(|(d, _)| d.clone().unwrap_or_else(|| "(inline)".into())).collect::<Vec<_>>()
        )
        .into())
    }
}

enum Dispatch {
    Tag {
        key: String,
        values: Vec<Option<String>>,
        default: Option<usize>,
    },
    Keys {
        keys: Vec<Option<String>>,
        default: Option<usize>,
    },
    Rules(Vec<(String, BTreeMap<String, String>, Vec<String>)>),
}
