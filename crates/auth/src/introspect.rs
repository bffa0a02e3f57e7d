//! introspection
