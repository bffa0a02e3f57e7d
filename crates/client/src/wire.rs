//! The edge where each protocol version's wire shapes become the version-neutral model
//! (`modelctx_types::model`) and back: results are decoded with the schema of the version spoken,
//! so a malformed result is an error here and never reaches the application.

use modelctx_session::ProtocolVersion;
use modelctx_types::model;
use modelctx_types::{
    ResultDecodeError, v2024_11_05, v2025_03_26, v2025_06_18, v2025_11_25, v2026_07_28,
};
use serde_json::Value;
use serde_json::value::RawValue;

use ProtocolVersion as V;

/// Decodes the result of `method` as `version` defines it, into the model.
pub(crate) fn result(
    version: ProtocolVersion,
    method: &str,
    raw: &RawValue,
) -> Result<model::ServerResult, ResultDecodeError> {
    Ok(match version {
        V::V2024_11_05 => v2024_11_05::ServerResult::decode(method, raw)?.into(),
        V::V2025_03_26 => v2025_03_26::ServerResult::decode(method, raw)?.into(),
        V::V2025_06_18 => v2025_06_18::ServerResult::decode(method, raw)?.into(),
        V::V2025_11_25 => v2025_11_25::ServerResult::decode(method, raw)?.into(),
        _ => v2026_07_28::ServerResult::decode(method, raw)?.into(),
    })
}

/// A request of a legacy server's, decoded as `version` defines it.
pub(crate) fn server_request(
    version: ProtocolVersion,
    method: &str,
    params: Option<&RawValue>,
) -> Result<model::ServerRequest, String> {
    let decoded = match version {
        V::V2024_11_05 => v2024_11_05::ServerRequest::from_parts(method, params).map(Into::into),
        V::V2025_03_26 => v2025_03_26::ServerRequest::from_parts(method, params).map(Into::into),
        V::V2025_06_18 => v2025_06_18::ServerRequest::from_parts(method, params).map(Into::into),
        V::V2025_11_25 => v2025_11_25::ServerRequest::from_parts(method, params).map(Into::into),
        _ => return Err(format!("servers send no requests in protocol {version}")),
    };
    decoded.map_err(|e| e.to_string())
}

/// Writes a model value as the wire type `version` has for it.
macro_rules! encode_in {
    ($version:expr, $value:expr, $ty:ident, [$($v:ident => $module:ident),*]) => {
        match $version {
            $(V::$v => serde_json::to_value($module::$ty::try_from($value).map_err(|e| e.to_string())?)
                .map_err(|e| e.to_string()),)*
            #[allow(unreachable_patterns)]
            other => Err(format!("protocol {other} has no {}", stringify!($ty))),
        }
    };
}

/// A `sampling/createMessage` answer in `version`.
pub(crate) fn create_message_result(
    version: ProtocolVersion,
    value: model::CreateMessageResult,
) -> Result<Value, String> {
    encode_in!(version, value, CreateMessageResult, [
        V2024_11_05 => v2024_11_05, V2025_03_26 => v2025_03_26, V2025_06_18 => v2025_06_18,
        V2025_11_25 => v2025_11_25, V2026_07_28 => v2026_07_28
    ])
}

/// A `roots/list` answer in `version`.
pub(crate) fn list_roots_result(
    version: ProtocolVersion,
    value: model::ListRootsResult,
) -> Result<Value, String> {
    encode_in!(version, value, ListRootsResult, [
        V2024_11_05 => v2024_11_05, V2025_03_26 => v2025_03_26, V2025_06_18 => v2025_06_18,
        V2025_11_25 => v2025_11_25, V2026_07_28 => v2026_07_28
    ])
}

/// An `elicitation/create` answer in `version` (2025-06-18 and later).
pub(crate) fn elicit_result(
    version: ProtocolVersion,
    value: model::ElicitResult,
) -> Result<Value, String> {
    encode_in!(version, value, ElicitResult, [
        V2025_06_18 => v2025_06_18, V2025_11_25 => v2025_11_25, V2026_07_28 => v2026_07_28
    ])
}

/// A notification from the server, decoded as `version` defines it.
pub(crate) fn server_notification(
    version: ProtocolVersion,
    method: &str,
    params: Option<&RawValue>,
) -> Result<model::ServerNotification, String> {
    let decoded = match version {
        V::V2024_11_05 => {
            v2024_11_05::ServerNotification::from_parts(method, params).map(Into::into)
        }
        V::V2025_03_26 => {
            v2025_03_26::ServerNotification::from_parts(method, params).map(Into::into)
        }
        V::V2025_06_18 => {
            v2025_06_18::ServerNotification::from_parts(method, params).map(Into::into)
        }
        V::V2025_11_25 => {
            v2025_11_25::ServerNotification::from_parts(method, params).map(Into::into)
        }
        _ => v2026_07_28::ServerNotification::from_parts(method, params).map(Into::into),
    };
    decoded.map_err(|e| e.to_string())
}

/// The input requests of a modern `input_required` result, decoded.
pub(crate) fn input_required(raw: &RawValue) -> Result<model::InputRequiredResult, String> {
    serde_json::from_str::<v2026_07_28::InputRequiredResult>(raw.get())
        .map(Into::into)
        .map_err(|e| e.to_string())
}

/// The `resultType` of a result, `complete` when absent.
pub(crate) fn result_type(raw: &RawValue) -> String {
    #[derive(serde::Deserialize)]
    struct Peek {
        #[serde(rename = "resultType")]
        result_type: Option<String>,
    }
    serde_json::from_str::<Peek>(raw.get())
        .ok()
        .and_then(|p| p.result_type)
        .unwrap_or_else(|| "complete".into())
}

/// A wire value of `version` decoded into its model type; `None` when it does not fit.
macro_rules! decode_in {
    ($version:expr, $value:expr, $ty:ident) => {
        match $version {
            V::V2024_11_05 => serde_json::from_value::<v2024_11_05::$ty>($value)
                .ok()
                .map(Into::into),
            V::V2025_03_26 => serde_json::from_value::<v2025_03_26::$ty>($value)
                .ok()
                .map(Into::into),
            V::V2025_06_18 => serde_json::from_value::<v2025_06_18::$ty>($value)
                .ok()
                .map(Into::into),
            V::V2025_11_25 => serde_json::from_value::<v2025_11_25::$ty>($value)
                .ok()
                .map(Into::into),
            _ => serde_json::from_value::<v2026_07_28::$ty>($value)
                .ok()
                .map(Into::into),
        }
    };
}

/// A server's `serverInfo`, as `version` defines it.
pub(crate) fn implementation(
    version: ProtocolVersion,
    info: Value,
) -> Option<model::Implementation> {
    decode_in!(version, info, Implementation)
}

/// A server's `capabilities`, as `version` defines them.
pub(crate) fn server_capabilities(
    version: ProtocolVersion,
    capabilities: Value,
) -> Option<model::ServerCapabilities> {
    decode_in!(version, capabilities, ServerCapabilities)
}
