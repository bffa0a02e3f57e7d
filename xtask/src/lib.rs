//! Project automation for the modelctx workspace, as a library so that tests can share the schema
//! loading (manifest, hashes, corrections) with the generator.

pub mod codegen;
pub mod schema;
