//! The aggregated view: every server's tools, resources, templates and prompts under one
//! namespace, and the routes back to their servers. Pure data: no I/O, no clock.
//!
//! OWNER: the catalog work package. The host core calls the `Catalog` methods below (their
//! signatures are the contract); the namespacing rules, collisions and resource routing are
//! yours.

use std::sync::Arc;

use modelctx_client::model;

/// How the host names what it aggregates.
///
/// Default: every tool and prompt is `{server}__{name}` (the server's config name, made to fit
/// the characters tool names allow). Resources keep their URIs.
#[derive(Clone)]
#[non_exhaustive]
pub struct Namespace {
    pub(crate) separator: String,
    pub(crate) only_on_collision: bool,
    pub(crate) custom: Option<Arc<dyn Fn(&str, &str) -> String + Send + Sync>>,
}

impl std::fmt::Debug for Namespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Namespace")
            .field("separator", &self.separator)
            .field("only_on_collision", &self.only_on_collision)
            .field("custom", &self.custom.is_some())
            .finish()
    }
}

impl Default for Namespace {
    fn default() -> Self {
        Namespace {
            separator: "__".into(),
            only_on_collision: false,
            custom: None,
        }
    }
}

/// A tool of the aggregate.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct HostTool {
    /// The name the host shows (namespaced).
    pub name: String,
    /// The server that owns it (its config name).
    pub server: String,
    /// The tool as its server listed it (its own name).
    pub tool: model::Tool,
}

/// A prompt of the aggregate.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct HostPrompt {
    /// The name the host shows (namespaced).
    pub name: String,
    /// The server that owns it.
    pub server: String,
    /// The prompt as its server listed it.
    pub prompt: model::Prompt,
}

/// A resource of the aggregate (its URI unchanged).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct HostResource {
    /// The server that owns it.
    pub server: String,
    /// The resource as its server listed it.
    pub resource: model::Resource,
}

/// A resource template of the aggregate (unchanged).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct HostTemplate {
    /// The server that owns it.
    pub server: String,
    /// The template as its server listed it.
    pub template: model::ResourceTemplate,
}

/// The aggregate of every server's lists, in config order.
#[derive(Debug)]
pub(crate) struct Catalog {
    namespace: Namespace,
    /// The servers' config names, in config order (the order ties are broken in).
    order: Vec<String>,
}

impl Catalog {
    pub(crate) fn new(namespace: Namespace, order: Vec<String>) -> Catalog {
        Catalog { namespace, order }
    }

    /// Replaces `server`'s tools; true when the aggregate's tools changed.
    pub(crate) fn set_tools(&mut self, server: &str, tools: Vec<model::Tool>) -> bool {
        let _ = (server, tools, &self.namespace, &self.order);
        unimplemented!("catalog work package")
    }

    /// Replaces `server`'s prompts; true when the aggregate's prompts changed.
    pub(crate) fn set_prompts(&mut self, server: &str, prompts: Vec<model::Prompt>) -> bool {
        let _ = (server, prompts);
        unimplemented!("catalog work package")
    }

    /// Replaces `server`'s resources; true when the aggregate's resources changed.
    pub(crate) fn set_resources(&mut self, server: &str, resources: Vec<model::Resource>) -> bool {
        let _ = (server, resources);
        unimplemented!("catalog work package")
    }

    /// Replaces `server`'s resource templates; true when the aggregate's templates changed.
    pub(crate) fn set_templates(
        &mut self,
        server: &str,
        templates: Vec<model::ResourceTemplate>,
    ) -> bool {
        let _ = (server, templates);
        unimplemented!("catalog work package")
    }

    /// Forgets everything of `server` (it is gone); the kinds that changed.
    pub(crate) fn clear(&mut self, server: &str) -> Changed {
        let _ = server;
        unimplemented!("catalog work package")
    }

    pub(crate) fn tools(&self) -> Vec<HostTool> {
        unimplemented!("catalog work package")
    }

    pub(crate) fn prompts(&self) -> Vec<HostPrompt> {
        unimplemented!("catalog work package")
    }

    pub(crate) fn resources(&self) -> Vec<HostResource> {
        unimplemented!("catalog work package")
    }

    pub(crate) fn templates(&self) -> Vec<HostTemplate> {
        unimplemented!("catalog work package")
    }

    /// The tool shown as `name`.
    pub(crate) fn route_tool(&self, name: &str) -> Option<&HostTool> {
        let _ = name;
        unimplemented!("catalog work package")
    }

    /// The prompt shown as `name`.
    pub(crate) fn route_prompt(&self, name: &str) -> Option<&HostPrompt> {
        let _ = name;
        unimplemented!("catalog work package")
    }

    /// The server that answers a read of `uri`: the one that listed it, else the one whose
    /// template matches it.
    pub(crate) fn route_resource(&self, uri: &str) -> Option<&str> {
        let _ = uri;
        unimplemented!("catalog work package")
    }
}

/// Which kinds of the aggregate changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Changed {
    pub(crate) tools: bool,
    pub(crate) prompts: bool,
    pub(crate) resources: bool,
    pub(crate) templates: bool,
}
