//! Unions dispatched on `method` (requests, notifications) and the result enums that go with them.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use serde_json::Value;

use super::{MethodArm, Module};
use crate::codegen::ir::Shape;
use crate::codegen::names::*;
use crate::schema::Error;

impl Module<'_> {
    /// Every member is an object with a `method` const: requests or notifications.
    pub(super) fn is_method_union(&self, arms: &[Value]) -> Result<bool, Error> {
        for arm in arms {
            if arm.get("$ref").is_none() {
                return Ok(false);
            }
            let def = self.resolve_all_of(self.deref(arm)?)?;
            if !def
                .pointer("/properties/method/const")
                .is_some_and(Value::is_string)
            {
                return Ok(false);
            }
        }
        Ok(!arms.is_empty())
    }

    pub(super) fn gen_method_union(
        &mut self,
        name: &str,
        doc: &str,
        arms: &[Value],
    ) -> Result<(), Error> {
        let doc = &doc_or_default(doc, name);
        let mut members = Vec::new();
        for arm in arms {
            let def_name = self
                .ref_name(arm["$ref"].as_str().unwrap_or_default())?
                .to_owned();
            self.ensure_def(&def_name)?;
            let def = self.resolve_all_of(self.def(&def_name)?)?;
            let method = def
                .pointer("/properties/method/const")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("{def_name} has no method const"))?
                .to_owned();
            let required: BTreeSet<&str> = def
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let params = match def.pointer("/properties/params") {
                Some(p) => {
                    let ty = self.ty(p, &format!("{def_name}Params"))?;
                    Some((ty.rust, required.contains("params")))
                }
                None => None,
            };
            let variant = def_name
                .strip_suffix("Request")
                .or_else(|| def_name.strip_suffix("Notification"))
                .unwrap_or(&def_name)
                .to_owned();
            members.push(MethodArm {
                variant,
                method,
                params,
                doc: first_line(&def),
                def: def_name,
            });
        }
        let variants = members
            .iter()
            .map(|m| {
                let payload = m.params.as_ref().map(|(ty, required)| {
                    if *required {
                        ty.clone()
                    } else {
                        format!("::core::option::Option<{ty}>")
                    }
                });
                (m.variant.clone(), payload)
            })
            .collect();
        self.ir
            .insert(name.to_owned(), (Shape::Union { variants }, doc.clone()));
        let mut out = format!(
            "{doc}///\n/// Dispatched on `method`; decode one from an envelope's method and raw params \
             with [`{name}::from_parts`].\n\
             #[derive(Debug, Clone, PartialEq)]\npub enum {name} {{\n"
        );
        for m in &members {
            let payload = match &m.params {
                Some((ty, true)) => format!("({ty})"),
                Some((ty, false)) => format!("(::core::option::Option<{ty}>)"),
                None => String::new(),
            };
            let _ = writeln!(
                out,
                "    /// `{}`: {} (see [`{}`])\n    {}{payload},",
                m.method, m.doc, m.def, m.variant
            );
        }
        out.push_str("}\n\n");
        let _ = write!(
            out,
            "impl {name} {{\n    /// Every method this enum dispatches.\n    pub const METHODS: &'static [&'static str] = &[{}];\n\n",
            members
                .iter()
                .map(|m| rust_str(&m.method))
                .collect::<Vec<_>>()
                .join(", ")
        );
        out.push_str("    /// The method.\n    pub fn method(&self) -> &'static str {\n        match self {\n");
        for m in &members {
            let pat = if m.params.is_some() { "(_)" } else { "" };
            let _ = writeln!(
                out,
                "            {name}::{}{pat} => {},",
                m.variant,
                rust_str(&m.method)
            );
        }
        out.push_str("        }\n    }\n\n");
        out.push_str(
            "    /// Decodes the params of `method`; the params stay unparsed until the method is known.\n\
             pub fn from_parts(method: &str, params: ::core::option::Option<&::serde_json::value::RawValue>) \
             -> ::core::result::Result<Self, crate::ParamsDecodeError> {\n        match method {\n",
        );
        for m in &members {
            let method = rust_str(&m.method);
            let line = match &m.params {
                Some((_, true)) => format!(
                    "crate::support::decode_params({method}, params).map({name}::{})",
                    m.variant
                ),
                Some((_, false)) => format!(
                    "crate::support::decode_optional_params({method}, params).map({name}::{})",
                    m.variant
                ),
                None => format!("::core::result::Result::Ok({name}::{})", m.variant),
            };
            let _ = writeln!(out, "            {method} => {line},");
        }
        out.push_str(
            "            other => ::core::result::Result::Err(crate::ParamsDecodeError::UnknownMethod(other.into())),\n        }\n    }\n}\n\n",
        );
        let _ = write!(
            out,
            "impl ::serde::Serialize for {name} {{\n    fn serialize<S: ::serde::Serializer>(&self, serializer: S) -> ::core::result::Result<S::Ok, S::Error> {{\n        match self {{\n"
        );
        for m in &members {
            let method = rust_str(&m.method);
            let line = match &m.params {
                Some((_, true)) => format!(
                    "{name}::{}(p) => crate::support::serialize_method_params(serializer, {method}, ::core::option::Option::Some(p)),",
                    m.variant
                ),
                Some((_, false)) => format!(
                    "{name}::{}(p) => crate::support::serialize_method_params(serializer, {method}, p.as_ref()),",
                    m.variant
                ),
                None => format!(
                    "{name}::{} => crate::support::serialize_method_params::<_, ()>(serializer, {method}, ::core::option::Option::None),",
                    m.variant
                ),
            };
            let _ = writeln!(out, "            {line}");
        }
        out.push_str("        }\n    }\n}\n\n");
        let _ = write!(
            out,
            "impl<'de> ::serde::Deserialize<'de> for {name} {{\n    fn deserialize<D: ::serde::Deserializer<'de>>(deserializer: D) -> ::core::result::Result<Self, D::Error> {{\n\
             let parts = crate::support::OwnedMethodAndParams::deserialize(deserializer)?;\n\
             let params = parts.raw_params().map_err(<D::Error as ::serde::de::Error>::custom)?;\n\
             {name}::from_parts(&parts.method, params.as_deref()).map_err(<D::Error as ::serde::de::Error>::custom)\n    }}\n}}\n"
        );
        self.items.insert(name.to_owned(), out);
        self.registry.insert(name.to_owned());
        self.method_unions.insert(
            name.to_owned(),
            members.iter().map(|m| m.method.clone()).collect(),
        );
        if name.ends_with("Request") {
            self.gen_result_enum(name, &members)?;
        }
        Ok(())
    }

    /// 2026-07-28 `InputResponse` members are separable by their keys, but the right way to
    /// decode one is by the method of the input request it answers: `InputResponse::decode`.
    fn gen_input_response_decode(&mut self, members: &[MethodArm]) -> Result<(), Error> {
        const NAME: &str = "InputResponse";
        if !self.defs.contains_key(NAME) {
            return Ok(());
        }
        self.named(NAME)?;
        let variants: Vec<String> = match self.ir.get(NAME) {
            Some((Shape::Union { variants }, _)) => {
                variants.iter().map(|(v, _)| v.clone()).collect()
            }
            _ => return Err(format!("{NAME} is not a union").into()),
        };
        let mut out = format!(
            "impl {NAME} {{\n    /// Decodes the response to an input request whose method was `method` (the \
             method of `inputRequests[key]` for the same key).\n\
             pub fn decode(method: &str, raw: &::serde_json::value::RawValue) -> \
             ::core::result::Result<Self, crate::ResultDecodeError> {{\n        match method {{\n"
        );
        for m in members {
            let stem = m.def.strip_suffix("Request").unwrap_or(&m.def);
            let result = format!("{stem}Result");
            if !variants.contains(&result) {
                return Err(format!("{NAME} has no member {result} for {}", m.method).into());
            }
            let _ = writeln!(
                out,
                "            {} => crate::support::decode_result({}, raw).map({NAME}::{result}),",
                rust_str(&m.method),
                rust_str(&m.method)
            );
        }
        out.push_str(
            "            other => ::core::result::Result::Err(crate::ResultDecodeError::UnknownMethod(other.into())),\n        }\n    }\n}\n",
        );
        self.items.insert(format!("{NAME}::decode"), out);
        Ok(())
    }

    /// The result enum for a request union, decoded by correlating with the method.
    fn gen_result_enum(&mut self, request_enum: &str, members: &[MethodArm]) -> Result<(), Error> {
        let name = match request_enum {
            "ClientRequest" => "ServerResult".to_owned(),
            "ServerRequest" => "ClientResult".to_owned(),
            "InputRequest" => return self.gen_input_response_decode(members),
            other => format!("{}Result", other.strip_suffix("Request").unwrap_or(other)),
        };
        let input_required = self.defs.contains_key("InputRequiredResult");
        let mut variants = Vec::new();
        for m in members {
            let stem = m.def.strip_suffix("Request").unwrap_or(&m.def);
            let (result, allows_input) =
                if let Some(resp) = self.defs.get(&format!("{stem}ResultResponse")) {
                    let arms: Vec<String> = resp
                        .pointer("/properties/result/anyOf")
                        .and_then(Value::as_array)
                        .map(|a| {
                            a.iter()
                                .filter_map(|x| x.get("$ref").and_then(Value::as_str))
                                .map(|r| self.ref_name(r).map(str::to_owned))
                                .collect::<Result<Vec<_>, _>>()
                        })
                        .transpose()?
                        .unwrap_or_else(|| {
                            resp.pointer("/properties/result/$ref")
                                .and_then(Value::as_str)
                                .and_then(|r| self.ref_name(r).ok().map(|s| vec![s.to_owned()]))
                                .unwrap_or_default()
                        });
                    let allows = arms.iter().any(|a| a == "InputRequiredResult");
                    let result = arms
                        .into_iter()
                        .find(|a| a != "InputRequiredResult")
                        .ok_or_else(|| format!("{stem}ResultResponse names no result"))?;
                    (result, allows)
                } else if self.defs.contains_key(&format!("{stem}Result")) {
                    (format!("{stem}Result"), false)
                } else if self.defs.contains_key("EmptyResult") {
                    ("EmptyResult".to_owned(), false)
                } else {
                    ("Result".to_owned(), false)
                };
            self.named(&result)?;
            variants.push((m, result, allows_input));
        }
        let modern = self
            .defs
            .get("Result")
            .is_some_and(|r| r.pointer("/properties/resultType").is_some());
        let mut out = format!(
            "/// A result of a [`{request_enum}`], decoded with [`{name}::decode`] by correlating it with the \
             request's method{}.\n#[derive(Debug, Clone, PartialEq, ::serde::Serialize)]\n#[serde(untagged)]\npub enum {name} {{\n",
            if modern {
                " and then the value of its `resultType`"
            } else {
                ""
            }
        );
        for (m, result, _) in &variants {
            let _ = writeln!(
                out,
                "    /// The result of `{}`.\n    {}({result}),",
                m.method, m.variant
            );
        }
        let any_input = variants.iter().any(|v| v.2);
        let mut ir_variants: Vec<(String, Option<String>)> = variants
            .iter()
            .map(|(m, result, _)| (m.variant.clone(), Some(result.clone())))
            .collect();
        if any_input && input_required {
            ir_variants.push(("InputRequired".into(), Some("InputRequiredResult".into())));
        }
        self.ir.insert(
            name.clone(),
            (
                Shape::Union {
                    variants: ir_variants,
                },
                String::new(),
            ),
        );
        if any_input && input_required {
            out.push_str("    /// `resultType: \"input_required\"`: the server needs input before it can finish.\n    InputRequired(InputRequiredResult),\n");
        }
        out.push_str("}\n\n");
        let _ = write!(
            out,
            "impl {name} {{\n    /// Decodes the result of a request whose method was `method`.\n\
             pub fn decode(method: &str, raw: &::serde_json::value::RawValue) -> ::core::result::Result<Self, crate::ResultDecodeError> {{\n        match method {{\n"
        );
        for (m, _, allows) in &variants {
            let method = rust_str(&m.method);
            if modern {
                let input_arm = if *allows && input_required {
                    format!(
                        "crate::ResultType::InputRequired => crate::support::decode_result({method}, raw).map({name}::InputRequired),\n"
                    )
                } else {
                    String::new()
                };
                let _ = writeln!(
                    out,
                    "            {method} => match crate::support::peek_result_type({method}, raw)? {{\n\
                     crate::ResultType::Complete => crate::support::decode_result({method}, raw).map({name}::{}),\n\
                     {input_arm}\
                     other => ::core::result::Result::Err(crate::ResultDecodeError::UnexpectedResultType {{ method: {method}, result_type: other }}),\n}},",
                    m.variant
                );
            } else {
                let _ = writeln!(
                    out,
                    "            {method} => crate::support::decode_result({method}, raw).map({name}::{}),",
                    m.variant
                );
            }
        }
        out.push_str(
            "            other => ::core::result::Result::Err(crate::ResultDecodeError::UnknownMethod(other.into())),\n        }\n    }\n}\n",
        );
        if self.items.contains_key(&name) {
            return Err(format!("result enum {name} collides with another type").into());
        }
        self.taken.insert(name.clone());
        self.items.insert(name, out);
        Ok(())
    }
}
