//! Two rules of the protocol that more than one layer applies, written once: which messages a
//! JSON-RPC batch may hold at which version, and which message opens a legacy session. The
//! session applies them to what it reads; a transport that must answer before the session reads
//! (a Streamable HTTP POST) asks them first. Like [`ProtocolVersion::allows_batches`], they are
//! facts of the protocol, so they live with its vocabulary, where every layer can reach them
//! without depending on the session.

use crate::{DecodeError, ErrorCode, ErrorObject, Message, ProtocolVersion};

/// Why a JSON-RPC batch is refused as a whole ([`check_batch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BatchRefused {
    /// Batches exist only in protocol 2025-03-26; `version` is the session's (`None`: nothing
    /// negotiated yet).
    #[error(
        "batches are allowed only on protocol 2025-03-26 sessions; this one has {}",
        version.map_or_else(|| "no version yet".to_owned(), |v| v.to_string())
    )]
    NotAllowed {
        /// The version the session speaks, if any.
        version: Option<ProtocolVersion>,
    },
    /// An `initialize` request is one of the members: it must come on its own.
    #[error("initialize must not be part of a batch")]
    Initialize,
}

impl BatchRefused {
    /// The JSON-RPC error code of the refusal: -32600 (invalid request).
    pub fn code(&self) -> ErrorCode {
        ErrorCode::INVALID_REQUEST
    }

    /// The refusal as a JSON-RPC error: [`code`](Self::code) and the refusal's text. The
    /// session answers a refused batch with it (one error response naming no id); an HTTP
    /// transport refuses the POST with it (400).
    pub fn to_error_object(&self) -> ErrorObject {
        ErrorObject::new(self.code(), self.to_string())
    }
}

/// The batch rules: whether a JSON-RPC batch (its decoded members) may be read by a session
/// speaking `version`. Batches exist only in protocol 2025-03-26, and `initialize` is never one
/// of their members. Members that could not be decoded are not judged here: they are answered
/// one by one inside an accepted batch.
///
/// The one place these rules are written: a session refuses a batch it reads with it (one
/// -32600 error naming no id), and a transport that must answer a batch before the session
/// reads it (a Streamable HTTP POST of notifications gets 202 at once) asks it first, with the
/// version the session negotiated.
pub fn check_batch(
    version: Option<ProtocolVersion>,
    elements: &[Result<Message, DecodeError>],
) -> Result<(), BatchRefused> {
    if !version.is_some_and(ProtocolVersion::allows_batches) {
        return Err(BatchRefused::NotAllowed { version });
    }
    if elements
        .iter()
        .any(|element| element.as_ref().is_ok_and(opens_session))
    {
        return Err(BatchRefused::Initialize);
    }
    Ok(())
}

/// Whether `message` opens a legacy session: an `initialize` request. A transport that keeps
/// sessions of its own (Streamable HTTP) opens one for such a message before the protocol session
/// reads it; whether the handshake succeeds is still the protocol session's to decide.
pub fn opens_session(message: &Message) -> bool {
    matches!(message, Message::Request(r) if r.method == crate::consts::Initialize::VALUE)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{BatchRefused, check_batch, opens_session};
    use crate::{DecodeError, Message, Notification, ProtocolVersion, Request, RequestId};

    fn request(id: i64, method: &str) -> Result<Message, DecodeError> {
        Ok(Request::new(RequestId::Number(id), method, &json!({}))
            .unwrap()
            .into())
    }

    /// The batch rules, written once: batches only at 2025-03-26 (and not before a version is
    /// negotiated), never with `initialize`; undecodable members are left to the batch reply.
    #[test]
    fn batches_are_judged_by_version_and_members() {
        let list = [request(1, "tools/list"), request(2, "ping")];
        let at = |v| Some(v);
        assert_eq!(check_batch(at(ProtocolVersion::V2025_03_26), &list), Ok(()));
        for version in [
            None,
            at(ProtocolVersion::V2024_11_05),
            at(ProtocolVersion::V2025_06_18),
            at(ProtocolVersion::V2025_11_25),
        ] {
            let refused = check_batch(version, &list).unwrap_err();
            assert_eq!(refused, BatchRefused::NotAllowed { version });
            assert_eq!(refused.code(), crate::ErrorCode::INVALID_REQUEST);
            let message = refused.to_error_object().message;
            assert!(message.contains("2025-03-26"), "{message}");
        }
        let with_initialize = [request(1, "tools/list"), request(2, "initialize")];
        assert_eq!(
            check_batch(at(ProtocolVersion::V2025_03_26), &with_initialize),
            Err(BatchRefused::Initialize)
        );
        // The version is judged first: a batch where none is allowed is refused as such.
        assert!(matches!(
            check_batch(at(ProtocolVersion::V2025_11_25), &with_initialize),
            Err(BatchRefused::NotAllowed { .. })
        ));
        let unreadable = crate::decode(br#"[{"jsonrpc":"1.0","id":1,"method":"x"}]"#);
        let Ok(crate::Incoming::Batch(unreadable)) = unreadable else {
            panic!("a batch");
        };
        assert_eq!(
            check_batch(at(ProtocolVersion::V2025_03_26), &unreadable),
            Ok(())
        );
    }

    /// Only an `initialize` request opens a session.
    #[test]
    fn only_initialize_opens_a_session() {
        assert!(opens_session(&request(1, "initialize").unwrap()));
        assert!(!opens_session(&request(1, "tools/list").unwrap()));
        let notification = Notification::new("initialize", &json!({})).unwrap();
        assert!(!opens_session(&notification.into()));
    }
}
