//! The aggregate served as one MCP server.
//!
//! OWNER: the gateway work package.
