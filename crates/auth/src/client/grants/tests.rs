//! The extension grants and DPoP on token requests, against in-process servers.
