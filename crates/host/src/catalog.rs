//! The aggregated view: every server's tools, resources, templates and prompts under one
//! namespace, and the routes back to their servers. Pure data: no I/O, no clock.
//!
//! OWNER: the catalog work package. The host core calls the `Catalog` methods below (their
//! signatures are the contract); the namespacing rules, collisions and resource routing are
//! yours.
//!
//! # Rules
//!
//! - **Names are a function of the lists.** Every `set_*` and [`Catalog::clear`] recomputes the
//!   names of its kind from every server's current list, walking the servers in config order
//!   (servers the config does not name come after, by name) and each server's list in its own
//!   order. The same config and the same lists thus give the same names whatever order the
//!   servers connected or refreshed in.
//! - **Shown names** come from the [`Namespace`]; a name longer than [`MAX_NAME_CHARS`] is
//!   shortened (its first 119 characters, `-`, and 8 hex digits of a hash of the whole name).
//! - **Collisions**: the first entry (in the walk above) keeps a name; a later entry of another
//!   server, or of the same server under another own name, gets `-2`, `-3`, ... (the first suffix
//!   no entry wants and none holds); a server listing one name twice has the second left out.
//!   Every entry not shown under the name it wanted is reported ([`Catalog::collisions`]).
//! - **Resources** keep their URIs; a URI listed by two servers is read from the first in config
//!   order, the other listing is left out and reported. Templates are all kept.
//! - **Bound**: the catalog holds each server's last lists (each entry once, with its shown name)
//!   and indexes of what is shown; nothing in it grows unless a server's list grows, and
//!   [`Catalog::clear`] drops everything of a server.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use modelctx_client::model;

/// The longest name the host shows, in characters: the bound the MCP specification (2025-11-25,
/// "Tool names") puts on tool names, applied to prompts too.
pub const MAX_NAME_CHARS: usize = 128;

/// How the host names what it aggregates.
///
/// Default ([`Namespace::prefixed`]): every tool and prompt is `{server}__{name}`. Resources keep
/// their URIs whatever the namespace.
///
/// The `{server}` part is the server's config name mapped to the characters the specification
/// allows in tool names (2025-11-25: `A-Z a-z 0-9 _ - .`): every other character (a space, `/`,
/// `:`, `@`, any non-ASCII character) becomes one `_`, and an empty name becomes `_`; see
/// [`Namespace::server_part`]. Two config names that map to the same part (`my server` and
/// `my_server`) give colliding names, handled like any collision. The server's own tool and
/// prompt names are used as the server gives them, and the separator as given.
///
/// Whatever the namespace, a shown name longer than [`MAX_NAME_CHARS`] is shortened and two
/// entries never show under one name (see [`Collision`]).
#[derive(Clone)]
#[non_exhaustive]
pub struct Namespace {
    pub(crate) separator: String,
    pub(crate) only_on_collision: bool,
    pub(crate) custom: Option<Arc<NameFn>>,
}

/// A custom naming function: `(server, own_name) -> shown name`.
type NameFn = dyn Fn(&str, &str) -> String + Send + Sync;

impl fmt::Debug for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
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

impl Namespace {
    /// Every tool and prompt shown as `{server}{separator}{name}` (the default, separator `__`).
    pub fn prefixed() -> Namespace {
        Namespace::default()
    }

    /// Names kept as the servers give them, except a name that two or more servers give: each
    /// of those is shown as `{server}{separator}{name}` (separator `__` by default).
    ///
    /// A host over one server thus shows that server's own names (what a gateway in front of a
    /// single server needs: clients call tools by name); a name becomes prefixed, for every
    /// server giving it, as soon as a second server lists it, and plain again when only one does.
    pub fn on_collision() -> Namespace {
        Namespace {
            only_on_collision: true,
            ..Namespace::default()
        }
    }

    /// Names given by `name(server, own_name)`, where `server` is the server's config name as
    /// written (not mapped) and `own_name` the tool's or prompt's name on that server. The
    /// separator is not used. The result is shown as returned, within the rules every namespace
    /// follows (length and collisions).
    pub fn custom<F>(name: F) -> Namespace
    where
        F: Fn(&str, &str) -> String + Send + Sync + 'static,
    {
        Namespace {
            custom: Some(Arc::new(name)),
            ..Namespace::default()
        }
    }

    /// The text between the server part and the name (default `__`), used as given.
    pub fn separator(mut self, separator: &str) -> Namespace {
        self.separator = separator.to_owned();
        self
    }

    /// The server part of the names of the server configured as `server`: every character
    /// other than `A-Z a-z 0-9 _ - .` replaced by `_`, and `_` for an empty name.
    ///
    /// ```
    /// use modelctx_host::Namespace;
    /// assert_eq!(Namespace::server_part("github"), "github");
    /// assert_eq!(Namespace::server_part("my server/v2"), "my_server_v2");
    /// assert_eq!(Namespace::server_part("café"), "caf_");
    /// ```
    pub fn server_part(server: &str) -> String {
        if server.is_empty() {
            return "_".to_owned();
        }
        server
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    }

    /// The name `own` of `server` would like to show as; `shared` says whether another server
    /// lists the same own name (used by [`Namespace::on_collision`] only).
    fn wanted(&self, server: &str, own: &str, shared: bool) -> String {
        if let Some(custom) = &self.custom {
            return custom(server, own);
        }
        if self.only_on_collision && !shared {
            return own.to_owned();
        }
        let part = Namespace::server_part(server);
        let mut name = String::with_capacity(part.len() + self.separator.len() + own.len());
        name.push_str(&part);
        name.push_str(&self.separator);
        name.push_str(own);
        name
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

/// What a [`Collision`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EntryKind {
    /// A tool.
    Tool,
    /// A prompt.
    Prompt,
    /// A resource (named by its URI).
    Resource,
}

impl fmt::Display for EntryKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EntryKind::Tool => "tool",
            EntryKind::Prompt => "prompt",
            EntryKind::Resource => "resource",
        })
    }
}

/// Why an entry is not shown under the name it wanted.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CollisionReason {
    /// An entry before it (an earlier server in config order, or earlier in the same server's
    /// list under another own name) holds that name; `by` is that entry's server.
    Taken {
        /// The server whose entry holds the name.
        by: String,
    },
    /// Its server lists the same name (or URI) more than once; only the first is shown.
    Duplicate,
    /// The name is longer than [`MAX_NAME_CHARS`]; it is shown shortened.
    TooLong,
}

/// An entry of a server's list that the aggregate shows under another name than it wanted, or
/// leaves out. Deterministic: the same config and lists give the same collisions.
///
/// Its [`Display`](fmt::Display) is a sentence for the host's log.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Collision {
    /// Tool, prompt or resource.
    pub kind: EntryKind,
    /// The server that listed the entry.
    pub server: String,
    /// The entry's own name on its server (a resource's URI).
    pub name: String,
    /// The name it would have shown as (for a resource, its URI).
    pub wanted: String,
    /// The name it shows as, or `None` when it is left out.
    pub shown: Option<String>,
    /// Why.
    pub reason: CollisionReason,
}

impl fmt::Display for Collision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} `{}` of server `{}`",
            self.kind, self.name, self.server
        )?;
        match &self.reason {
            CollisionReason::Taken { by } => {
                write!(f, ": `{}` is taken by server `{by}`", self.wanted)?
            }
            CollisionReason::Duplicate => write!(f, ": listed more than once by its server")?,
            CollisionReason::TooLong => write!(
                f,
                ": `{}` is longer than {MAX_NAME_CHARS} characters",
                self.wanted
            )?,
        }
        match &self.shown {
            Some(shown) => write!(f, "; shown as `{shown}`"),
            None => write!(f, "; left out"),
        }
    }
}

/// An entry of a kind the catalog aggregates by name (tools, prompts) or URI (resources).
trait Entry: Clone + PartialEq {
    /// What the server lists.
    type Item: PartialEq;
    /// Its kind, for collisions.
    const KIND: EntryKind;
    fn new(server: &str, item: Self::Item) -> Self;
    fn item(&self) -> &Self::Item;
    /// Its own name on its server (a resource's URI).
    fn own(&self) -> &str;
    /// Sets the name it shows as (nothing for resources, shown as their URI).
    fn set_shown(&mut self, name: String);
}

impl Entry for HostTool {
    type Item = model::Tool;
    const KIND: EntryKind = EntryKind::Tool;
    fn new(server: &str, tool: model::Tool) -> Self {
        HostTool {
            name: String::new(),
            server: server.to_owned(),
            tool,
        }
    }
    fn item(&self) -> &model::Tool {
        &self.tool
    }
    fn own(&self) -> &str {
        &self.tool.name
    }
    fn set_shown(&mut self, name: String) {
        self.name = name;
    }
}

impl Entry for HostPrompt {
    type Item = model::Prompt;
    const KIND: EntryKind = EntryKind::Prompt;
    fn new(server: &str, prompt: model::Prompt) -> Self {
        HostPrompt {
            name: String::new(),
            server: server.to_owned(),
            prompt,
        }
    }
    fn item(&self) -> &model::Prompt {
        &self.prompt
    }
    fn own(&self) -> &str {
        &self.prompt.name
    }
    fn set_shown(&mut self, name: String) {
        self.name = name;
    }
}

impl Entry for HostResource {
    type Item = model::Resource;
    const KIND: EntryKind = EntryKind::Resource;
    fn new(server: &str, resource: model::Resource) -> Self {
        HostResource {
            server: server.to_owned(),
            resource,
        }
    }
    fn item(&self) -> &model::Resource {
        &self.resource
    }
    fn own(&self) -> &str {
        &self.resource.uri
    }
    fn set_shown(&mut self, _: String) {}
}

/// The servers' places in the walk: config order, then the others by name.
#[derive(Debug)]
struct Order {
    /// Each config name's position (the first, if the config repeats a name).
    position: HashMap<String, usize>,
}

impl Order {
    fn new(order: &[String]) -> Order {
        let mut position = HashMap::with_capacity(order.len());
        for (i, name) in order.iter().enumerate() {
            position.entry(name.clone()).or_insert(i);
        }
        Order { position }
    }

    /// `servers` in walk order.
    fn sorted<'a>(&self, servers: impl Iterator<Item = &'a String>) -> Vec<String> {
        let mut servers: Vec<&String> = servers.collect();
        servers.sort_by(|a, b| {
            let rank = |s: &String| self.position.get(s).copied().unwrap_or(usize::MAX);
            rank(a).cmp(&rank(b)).then_with(|| a.cmp(b))
        });
        servers.into_iter().cloned().collect()
    }
}

/// One server's list of a kind, each entry with whether it is shown.
#[derive(Debug)]
struct Listed<E> {
    entries: Vec<E>,
    shown: Vec<bool>,
}

/// Every server's list of one kind, and what is shown.
#[derive(Debug)]
struct Table<E> {
    /// Each server's last list (the servers that gave one).
    lists: HashMap<String, Listed<E>>,
    /// Shown name (or URI) to its server and its place in that server's list.
    index: HashMap<String, (String, usize)>,
    /// The entries not shown as they wanted, in walk order.
    collisions: Vec<Collision>,
}

impl<E: Entry> Table<E> {
    fn new() -> Table<E> {
        Table {
            lists: HashMap::new(),
            index: HashMap::new(),
            collisions: Vec::new(),
        }
    }

    /// The shown entries, in walk order.
    fn shown(&self, order: &Order) -> Vec<E> {
        let mut out = Vec::new();
        for server in order.sorted(self.lists.keys()) {
            if let Some(listed) = self.lists.get(&server) {
                out.extend(
                    listed
                        .entries
                        .iter()
                        .zip(&listed.shown)
                        .filter(|(_, shown)| **shown)
                        .map(|(entry, _)| entry.clone()),
                );
            }
        }
        out
    }

    fn get(&self, name: &str) -> Option<&E> {
        let (server, i) = self.index.get(name)?;
        self.lists.get(server)?.entries.get(*i)
    }

    /// Replaces `server`'s list (`None`: forgets it) and recomputes with `rebuild`; true when
    /// the shown entries changed.
    fn replace(
        &mut self,
        order: &Order,
        server: &str,
        items: Option<Vec<E::Item>>,
        rebuild: impl FnOnce(&mut Table<E>, &Order),
    ) -> bool {
        let same = match (self.lists.get(server), &items) {
            (Some(listed), Some(items)) => listed.entries.iter().map(Entry::item).eq(items.iter()),
            (None, None) => true,
            _ => false,
        };
        if same {
            return false;
        }
        let before = self.shown(order);
        match items {
            Some(items) => {
                let entries: Vec<E> = items.into_iter().map(|item| E::new(server, item)).collect();
                let shown = vec![false; entries.len()];
                self.lists
                    .insert(server.to_owned(), Listed { entries, shown });
            }
            None => {
                self.lists.remove(server);
            }
        }
        rebuild(self, order);
        self.shown(order) != before
    }
}

/// Recomputes the shown names of a named kind (tools, prompts) from every server's list.
fn rebuild_named<E: Entry>(table: &mut Table<E>, order: &Order, namespace: &Namespace) {
    let servers = order.sorted(table.lists.keys());
    let lists: Vec<&Listed<E>> = servers.iter().filter_map(|s| table.lists.get(s)).collect();

    // How many servers give each own name (for `Namespace::on_collision`).
    let mut givers: HashMap<&str, usize> = HashMap::new();
    if namespace.only_on_collision && namespace.custom.is_none() {
        for listed in &lists {
            let mut seen = HashSet::new();
            for entry in &listed.entries {
                if seen.insert(entry.own()) {
                    *givers.entry(entry.own()).or_default() += 1;
                }
            }
        }
    }
    // The name each entry wants, and that name made to fit.
    let wanted: Vec<Vec<(String, String)>> = servers
        .iter()
        .zip(&lists)
        .map(|(server, listed)| {
            listed
                .entries
                .iter()
                .map(|entry| {
                    let shared = givers.get(entry.own()).is_some_and(|&n| n > 1);
                    let wanted = namespace.wanted(server, entry.own(), shared);
                    let fitted = fit(&wanted);
                    (wanted, fitted)
                })
                .collect()
        })
        .collect();
    let wanted_names: HashSet<&str> = wanted
        .iter()
        .flatten()
        .map(|(_, fitted)| fitted.as_str())
        .collect();

    // Shown name -> (server, own name) of the entry holding it.
    let mut taken: HashMap<String, (String, String)> = HashMap::new();
    let mut next_suffix: HashMap<String, usize> = HashMap::new();
    let mut collisions = Vec::new();
    let mut index = HashMap::new();
    let mut assigned: Vec<Vec<Option<String>>> = Vec::with_capacity(servers.len());
    for ((server, listed), wanted) in servers.iter().zip(&lists).zip(&wanted) {
        let mut names = Vec::with_capacity(listed.entries.len());
        for (i, (entry, (want, fitted))) in listed.entries.iter().zip(wanted).enumerate() {
            let (shown, reason) = match taken.get(fitted) {
                None => (
                    Some(fitted.clone()),
                    (fitted != want).then_some(CollisionReason::TooLong),
                ),
                Some((by, own)) if by == server && own == entry.own() => {
                    (None, Some(CollisionReason::Duplicate))
                }
                Some((by, _)) => {
                    let by = by.clone();
                    let name = unused(fitted, &wanted_names, &taken, &mut next_suffix);
                    (Some(name), Some(CollisionReason::Taken { by }))
                }
            };
            if let Some(name) = &shown {
                taken.insert(name.clone(), (server.clone(), entry.own().to_owned()));
                index.insert(name.clone(), (server.clone(), i));
            }
            if let Some(reason) = reason {
                collisions.push(Collision {
                    kind: E::KIND,
                    server: server.clone(),
                    name: entry.own().to_owned(),
                    wanted: want.clone(),
                    shown: shown.clone(),
                    reason,
                });
            }
            names.push(shown);
        }
        assigned.push(names);
    }
    drop(lists);
    for (server, names) in servers.iter().zip(assigned) {
        if let Some(listed) = table.lists.get_mut(server) {
            for (i, name) in names.into_iter().enumerate() {
                if let (Some(entry), Some(shown)) =
                    (listed.entries.get_mut(i), listed.shown.get_mut(i))
                {
                    *shown = name.is_some();
                    entry.set_shown(name.unwrap_or_default());
                }
            }
        }
    }
    table.index = index;
    table.collisions = collisions;
}

/// Recomputes which resource answers each URI: the first listing in walk order.
fn rebuild_resources(table: &mut Table<HostResource>, order: &Order) {
    let servers = order.sorted(table.lists.keys());
    let mut index: HashMap<String, (String, usize)> = HashMap::new();
    let mut collisions = Vec::new();
    for server in &servers {
        let Some(listed) = table.lists.get_mut(server) else {
            continue;
        };
        for (i, (entry, shown)) in listed
            .entries
            .iter()
            .zip(listed.shown.iter_mut())
            .enumerate()
        {
            let uri = entry.own();
            match index.get(uri) {
                None => {
                    index.insert(uri.to_owned(), (server.clone(), i));
                    *shown = true;
                }
                Some((by, _)) => {
                    let reason = if by == server {
                        CollisionReason::Duplicate
                    } else {
                        CollisionReason::Taken { by: by.clone() }
                    };
                    collisions.push(Collision {
                        kind: EntryKind::Resource,
                        server: server.clone(),
                        name: uri.to_owned(),
                        wanted: uri.to_owned(),
                        shown: None,
                        reason,
                    });
                    *shown = false;
                }
            }
        }
    }
    table.index = index;
    table.collisions = collisions;
}

/// `name`, or when it is longer than [`MAX_NAME_CHARS`] its first 119 characters, `-` and the
/// 8 hex digits of its FNV-1a hash (stable across runs and platforms).
fn fit(name: &str) -> String {
    if name.chars().count() <= MAX_NAME_CHARS {
        return name.to_owned();
    }
    let hash = fnv1a(name.as_bytes());
    let mut short: String = name.chars().take(MAX_NAME_CHARS - 9).collect();
    short.push_str(&format!("-{hash:08x}"));
    short
}

/// 32-bit FNV-1a.
fn fnv1a(bytes: &[u8]) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for &b in bytes {
        hash ^= u32::from(b);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash
}

/// The first of `{base}-2`, `{base}-3`, ... (the base cut so the whole fits in
/// [`MAX_NAME_CHARS`]) that no entry wants and none holds.
fn unused(
    base: &str,
    wanted: &HashSet<&str>,
    taken: &HashMap<String, (String, String)>,
    next_suffix: &mut HashMap<String, usize>,
) -> String {
    let n = next_suffix.entry(base.to_owned()).or_insert(2);
    loop {
        let tail = format!("-{n}");
        let keep = MAX_NAME_CHARS.saturating_sub(tail.len());
        let mut name: String = base.chars().take(keep).collect();
        name.push_str(&tail);
        *n += 1;
        if !wanted.contains(name.as_str()) && !taken.contains_key(&name) {
            return name;
        }
    }
}

/// One server's resource templates, each parsed for routing (`None`: not a template this
/// matcher reads; it never routes).
#[derive(Debug)]
struct Templates {
    entries: Vec<HostTemplate>,
    parsed: Vec<Option<uri_template::Template>>,
}

/// The aggregate of every server's lists, in config order.
#[derive(Debug)]
pub(crate) struct Catalog {
    namespace: Namespace,
    /// The servers' config names, in config order (the order ties are broken in).
    order: Order,
    tools: Table<HostTool>,
    prompts: Table<HostPrompt>,
    resources: Table<HostResource>,
    templates: HashMap<String, Templates>,
}

impl Catalog {
    pub(crate) fn new(namespace: Namespace, order: Vec<String>) -> Catalog {
        Catalog {
            namespace,
            order: Order::new(&order),
            tools: Table::new(),
            prompts: Table::new(),
            resources: Table::new(),
            templates: HashMap::new(),
        }
    }

    /// Replaces `server`'s tools; true when the aggregate's tools changed (their names, owners
    /// or contents; an equal list gives false).
    pub(crate) fn set_tools(&mut self, server: &str, tools: Vec<model::Tool>) -> bool {
        let namespace = &self.namespace;
        self.tools
            .replace(&self.order, server, Some(tools), |table, order| {
                rebuild_named(table, order, namespace)
            })
    }

    /// Replaces `server`'s prompts; true when the aggregate's prompts changed.
    pub(crate) fn set_prompts(&mut self, server: &str, prompts: Vec<model::Prompt>) -> bool {
        let namespace = &self.namespace;
        self.prompts
            .replace(&self.order, server, Some(prompts), |table, order| {
                rebuild_named(table, order, namespace)
            })
    }

    /// Replaces `server`'s resources; true when the aggregate's resources changed.
    ///
    /// Call it (even with an empty list) only for a server that declares the `resources`
    /// capability: a server given resources or templates counts as declaring it for
    /// [`route_resource`](Self::route_resource).
    pub(crate) fn set_resources(&mut self, server: &str, resources: Vec<model::Resource>) -> bool {
        self.resources
            .replace(&self.order, server, Some(resources), rebuild_resources)
    }

    /// Replaces `server`'s resource templates; true when the aggregate's templates changed.
    pub(crate) fn set_templates(
        &mut self,
        server: &str,
        templates: Vec<model::ResourceTemplate>,
    ) -> bool {
        if let Some(old) = self.templates.get(server)
            && old.entries.iter().map(|t| &t.template).eq(templates.iter())
        {
            return false;
        }
        let before = self.templates();
        let parsed = templates
            .iter()
            .map(|t| uri_template::Template::parse(&t.uri_template))
            .collect();
        let entries = templates
            .into_iter()
            .map(|template| HostTemplate {
                server: server.to_owned(),
                template,
            })
            .collect();
        self.templates
            .insert(server.to_owned(), Templates { entries, parsed });
        self.templates() != before
    }

    /// Forgets everything of `server` (it is gone); the kinds that changed.
    pub(crate) fn clear(&mut self, server: &str) -> Changed {
        let namespace = &self.namespace;
        let tools = self
            .tools
            .replace(&self.order, server, None, |table, order| {
                rebuild_named(table, order, namespace)
            });
        let prompts = self
            .prompts
            .replace(&self.order, server, None, |table, order| {
                rebuild_named(table, order, namespace)
            });
        let resources = self
            .resources
            .replace(&self.order, server, None, rebuild_resources);
        let templates = self
            .templates
            .remove(server)
            .is_some_and(|gone| !gone.entries.is_empty());
        Changed {
            tools,
            prompts,
            resources,
            templates,
        }
    }

    /// Every shown tool: servers in config order, each server's tools in its order.
    pub(crate) fn tools(&self) -> Vec<HostTool> {
        self.tools.shown(&self.order)
    }

    /// Every shown prompt, in the same order as [`tools`](Self::tools).
    pub(crate) fn prompts(&self) -> Vec<HostPrompt> {
        self.prompts.shown(&self.order)
    }

    /// Every resource, each URI once (from the first server in config order that lists it).
    pub(crate) fn resources(&self) -> Vec<HostResource> {
        self.resources.shown(&self.order)
    }

    /// Every server's resource templates, servers in config order (none left out: two servers
    /// may list the same template; reads are routed to the first).
    pub(crate) fn templates(&self) -> Vec<HostTemplate> {
        let mut out = Vec::new();
        for server in self.order.sorted(self.templates.keys()) {
            if let Some(templates) = self.templates.get(&server) {
                out.extend(templates.entries.iter().cloned());
            }
        }
        out
    }

    /// The entries not shown under the name (or URI) they wanted: tools, then prompts, then
    /// resources, each in config order. Recomputed with the names; empty when there are none.
    pub(crate) fn collisions(&self) -> Vec<Collision> {
        self.tools
            .collisions
            .iter()
            .chain(&self.prompts.collisions)
            .chain(&self.resources.collisions)
            .cloned()
            .collect()
    }

    /// The tool shown as `name`.
    pub(crate) fn route_tool(&self, name: &str) -> Option<&HostTool> {
        self.tools.get(name)
    }

    /// The prompt shown as `name`.
    pub(crate) fn route_prompt(&self, name: &str) -> Option<&HostPrompt> {
        self.prompts.get(name)
    }

    /// The server that answers a read of `uri`: the one that listed it (the first in config
    /// order, if several did); else the first server in config order with a resource template
    /// that matches it (see [`uri_template`]); else, when exactly one server declares resources
    /// (was given resources or templates), that one; else `None`.
    pub(crate) fn route_resource(&self, uri: &str) -> Option<&str> {
        if let Some(resource) = self.resources.get(uri) {
            return Some(&resource.server);
        }
        for server in self.order.sorted(self.templates.keys()) {
            let Some((server, templates)) = self.templates.get_key_value(&server) else {
                continue;
            };
            if templates.parsed.iter().flatten().any(|t| t.matches(uri)) {
                return Some(server);
            }
        }
        let mut declaring = self
            .resources
            .lists
            .keys()
            .chain(self.templates.keys())
            .collect::<HashSet<_>>()
            .into_iter();
        match (declaring.next(), declaring.next()) {
            (Some(only), None) => Some(only.as_str()),
            _ => None,
        }
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

impl Changed {
    /// Whether any kind changed.
    pub(crate) fn any(&self) -> bool {
        self.tools || self.prompts || self.resources || self.templates
    }
}

/// Matching URIs against the resource templates of the servers, to route reads.
///
/// The host only needs to know *whether* a server's template can produce a URI (the server
/// then extracts the values itself), so this is a matcher of the URIs an RFC 6570 template
/// (levels 1 to 4) can expand to, not an extractor. Each template is compiled to a small
/// automaton and a URI matches when some expansion of the template equals it:
///
/// - a literal matches itself (a pct-encoded triplet also with the other case of hex digits);
/// - `{x}` (and `{x,y}`, `{x*}`): any run, possibly empty, of characters other than `/ ? #`;
/// - `{+x}`: any run of characters; `{#x}`: nothing, or `#` and any run of characters;
/// - `{/x}`: up to one `/segment` per variable (any number with `{/x*}`), a segment being a run
///   of characters other than `/ ? #`; `{.x}` likewise with `.label` (no `.` in a label) and
///   `{;x}` with `;param` (no `;` in a param);
/// - `{?x,y}` and `{&x}`: nothing, or `?` (`&`) and any run of characters other than `#`.
///
/// Prefix modifiers (`:N`) are accepted and not checked. A template with an unclosed or empty
/// expression, a reserved operator (`= , ! @ |`), a bad variable name or a lone `%` is not
/// compiled (it routes nothing), nor one over 4096 bytes. This is looser than a server's own
/// matching (modelctx-server's is greedy and checks values), which is what routing wants:
/// a URI the server then does not recognize gets the server's own "not found".
///
/// Cost: one pass over the URI, each byte stepping the set of live states (at most the
/// automaton's size, linear in the template's length): O(len(uri) × len(template)).
mod uri_template {
    /// The longest template compiled, in bytes.
    const MAX_TEMPLATE_LEN: usize = 4096;

    /// A compiled template.
    #[derive(Debug, Clone)]
    pub(super) struct Template {
        program: Vec<Inst>,
    }

    /// An instruction of the automaton (a Pike VM program).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Inst {
        /// Consumes this byte.
        Byte(u8),
        /// Consumes this lower-case hex digit in either case.
        Hex(u8),
        /// Consumes one byte of the class.
        Class(Class),
        /// Goes on at both.
        Split(usize, usize),
        /// Goes on there.
        Jump(usize),
        /// The URI matches if it ends here.
        Match,
    }

    /// A set of bytes.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Class {
        /// Every byte.
        Any,
        /// Every byte but these.
        Not(&'static [u8]),
    }

    impl Class {
        fn contains(self, byte: u8) -> bool {
            match self {
                Class::Any => true,
                Class::Not(excluded) => !excluded.contains(&byte),
            }
        }
    }

    impl Template {
        /// Compiles `template`; `None` when it is not a template this module reads.
        pub(super) fn parse(template: &str) -> Option<Template> {
            if template.len() > MAX_TEMPLATE_LEN {
                return None;
            }
            let bytes = template.as_bytes();
            let mut program = Vec::new();
            let mut i = 0;
            while let Some(&c) = bytes.get(i) {
                match c {
                    b'{' => {
                        let close = i + 1 + bytes.get(i + 1..)?.iter().position(|&b| b == b'}')?;
                        expression(template.get(i + 1..close)?, &mut program)?;
                        i = close + 1;
                    }
                    b'}' => return None,
                    b'%' => {
                        let (h, l) = (*bytes.get(i + 1)?, *bytes.get(i + 2)?);
                        if !h.is_ascii_hexdigit() || !l.is_ascii_hexdigit() {
                            return None;
                        }
                        program.push(Inst::Byte(b'%'));
                        program.push(Inst::Hex(h.to_ascii_lowercase()));
                        program.push(Inst::Hex(l.to_ascii_lowercase()));
                        i += 3;
                    }
                    _ => {
                        program.push(Inst::Byte(c));
                        i += 1;
                    }
                }
            }
            program.push(Inst::Match);
            Some(Template { program })
        }

        /// Whether some expansion of the template is `uri`.
        pub(super) fn matches(&self, uri: &str) -> bool {
            let len = self.program.len();
            let mut marks = vec![0usize; len];
            let mut stack = Vec::new();
            let mut current = Vec::new();
            let mut next = Vec::new();
            let mut generation = 1;
            self.add(0, &mut current, &mut marks, generation, &mut stack);
            for &byte in uri.as_bytes() {
                generation += 1;
                next.clear();
                for &pc in &current {
                    let step = match self.program.get(pc) {
                        Some(Inst::Byte(b)) => *b == byte,
                        Some(Inst::Hex(h)) => byte.to_ascii_lowercase() == *h,
                        Some(Inst::Class(class)) => class.contains(byte),
                        _ => false,
                    };
                    if step {
                        self.add(pc + 1, &mut next, &mut marks, generation, &mut stack);
                    }
                }
                std::mem::swap(&mut current, &mut next);
                if current.is_empty() {
                    return false;
                }
            }
            current
                .iter()
                .any(|&pc| self.program.get(pc) == Some(&Inst::Match))
        }

        /// Adds `pc` and what it reaches without consuming to `list` (once per generation).
        fn add(
            &self,
            pc: usize,
            list: &mut Vec<usize>,
            marks: &mut [usize],
            generation: usize,
            stack: &mut Vec<usize>,
        ) {
            stack.push(pc);
            while let Some(pc) = stack.pop() {
                let Some(mark) = marks.get_mut(pc) else {
                    continue;
                };
                if *mark == generation {
                    continue;
                }
                *mark = generation;
                match self.program.get(pc) {
                    Some(Inst::Split(a, b)) => {
                        stack.push(*b);
                        stack.push(*a);
                    }
                    Some(Inst::Jump(a)) => stack.push(*a),
                    Some(_) => list.push(pc),
                    None => {}
                }
            }
        }
    }

    /// Compiles the expression `body` (between the braces).
    fn expression(body: &str, program: &mut Vec<Inst>) -> Option<()> {
        let (op, vars) = match body.as_bytes().first()? {
            b'=' | b',' | b'!' | b'@' | b'|' => return None,
            op @ (b'+' | b'#' | b'.' | b'/' | b';' | b'?' | b'&') => (Some(*op), body.get(1..)?),
            _ => (None, body),
        };
        let mut count = 0;
        let mut explode = false;
        for var in vars.split(',') {
            let (name, modifier) = match var.find([':', '*']) {
                Some(at) => var.split_at(at),
                None => (var, ""),
            };
            let name_ok = !name.is_empty()
                && !name.starts_with('.')
                && !name.ends_with('.')
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'%'));
            let modifier_ok = match modifier.as_bytes() {
                [] => true,
                [b'*'] => {
                    explode = true;
                    true
                }
                [b':', digits @ ..] => {
                    (1..=4).contains(&digits.len())
                        && digits.iter().all(u8::is_ascii_digit)
                        && digits.first() != Some(&b'0')
                }
                _ => false,
            };
            if !name_ok || !modifier_ok {
                return None;
            }
            count += 1;
        }
        let times = if explode { None } else { Some(count) };
        match op {
            None => star(program, Class::Not(b"/?#")),
            Some(b'+') => star(program, Class::Any),
            Some(b'#') => repeat(program, b'#', Class::Any, Some(1)),
            Some(b'.') => repeat(program, b'.', Class::Not(b"/?#."), times),
            Some(b'/') => repeat(program, b'/', Class::Not(b"/?#"), times),
            Some(b';') => repeat(program, b';', Class::Not(b"/?#;"), times),
            Some(b'?') => repeat(program, b'?', Class::Not(b"#"), Some(1)),
            Some(b'&') => repeat(program, b'&', Class::Not(b"#"), Some(1)),
            Some(_) => return None,
        }
        Some(())
    }

    /// Any run of `class` bytes, possibly empty.
    fn star(program: &mut Vec<Inst>, class: Class) {
        let at = program.len();
        program.push(Inst::Split(at + 1, at + 3));
        program.push(Inst::Class(class));
        program.push(Inst::Jump(at));
    }

    /// `lead` and a run of `class` bytes, up to `times` times (`None`: any number of times).
    fn repeat(program: &mut Vec<Inst>, lead: u8, class: Class, times: Option<usize>) {
        let mut splits = Vec::new();
        match times {
            None => {
                let at = program.len();
                splits.push(at);
                program.push(Inst::Split(0, 0));
                program.push(Inst::Byte(lead));
                star(program, class);
                program.push(Inst::Jump(at));
            }
            Some(times) => {
                for _ in 0..times {
                    splits.push(program.len());
                    program.push(Inst::Split(0, 0));
                    program.push(Inst::Byte(lead));
                    star(program, class);
                }
            }
        }
        let end = program.len();
        for at in splits {
            if let Some(split) = program.get_mut(at) {
                *split = Inst::Split(at + 1, end);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use modelctx_types::v2025_11_25 as wire;
    use serde_json::json;

    fn tool(name: &str) -> model::Tool {
        serde_json::from_value::<wire::Tool>(json!({
            "name": name,
            "inputSchema": {"type": "object"},
        }))
        .expect("a tool")
        .into()
    }

    fn tools(names: &[&str]) -> Vec<model::Tool> {
        names.iter().map(|n| tool(n)).collect()
    }

    fn prompt(name: &str) -> model::Prompt {
        serde_json::from_value::<wire::Prompt>(json!({"name": name}))
            .expect("a prompt")
            .into()
    }

    fn resource(uri: &str) -> model::Resource {
        serde_json::from_value::<wire::Resource>(json!({"uri": uri, "name": uri}))
            .expect("a resource")
            .into()
    }

    fn template(uri_template: &str) -> model::ResourceTemplate {
        serde_json::from_value::<wire::ResourceTemplate>(json!({
            "uriTemplate": uri_template,
            "name": uri_template,
        }))
        .expect("a template")
        .into()
    }

    fn catalog(namespace: Namespace, servers: &[&str]) -> Catalog {
        Catalog::new(namespace, servers.iter().map(|s| s.to_string()).collect())
    }

    /// (shown name, server, own name) of every shown tool.
    fn shown(catalog: &Catalog) -> Vec<(String, String, String)> {
        catalog
            .tools()
            .into_iter()
            .map(|t| (t.name, t.server, t.tool.name))
            .collect()
    }

    fn triple(shown: &str, server: &str, own: &str) -> (String, String, String) {
        (shown.into(), server.into(), own.into())
    }

    #[test]
    fn the_default_namespace_prefixes_every_tool_and_prompt_with_its_server() {
        let mut c = catalog(Namespace::default(), &["github", "files"]);
        assert!(c.set_tools("github", tools(&["search", "issue"])));
        assert!(c.set_tools("files", tools(&["search"])));
        assert!(c.set_prompts("files", vec![prompt("summarize")]));
        assert_eq!(
            shown(&c),
            [
                triple("github__search", "github", "search"),
                triple("github__issue", "github", "issue"),
                triple("files__search", "files", "search"),
            ]
        );
        let prompts = c.prompts();
        assert_eq!(prompts.len(), 1);
        assert_eq!(prompts[0].name, "files__summarize");
        assert!(c.collisions().is_empty());
    }

    #[test]
    fn a_separator_replaces_the_double_underscore() {
        let mut c = catalog(Namespace::prefixed().separator("."), &["a"]);
        c.set_tools("a", tools(&["x"]));
        assert_eq!(shown(&c), [triple("a.x", "a", "x")]);
        let mut c = catalog(Namespace::on_collision().separator("-"), &["a", "b"]);
        c.set_tools("a", tools(&["x"]));
        c.set_tools("b", tools(&["x"]));
        assert_eq!(
            shown(&c),
            [triple("a-x", "a", "x"), triple("b-x", "b", "x")]
        );
    }

    #[test]
    fn the_server_part_maps_what_tool_names_do_not_allow_to_underscores() {
        assert_eq!(Namespace::server_part("Git-Hub_2.0"), "Git-Hub_2.0");
        assert_eq!(Namespace::server_part("my server"), "my_server");
        assert_eq!(Namespace::server_part("a/b:c@d,e"), "a_b_c_d_e");
        assert_eq!(Namespace::server_part("café"), "caf_");
        assert_eq!(Namespace::server_part("日本"), "__");
        assert_eq!(Namespace::server_part(""), "_");
        let mut c = catalog(Namespace::default(), &["my server"]);
        c.set_tools("my server", tools(&["x"]));
        assert_eq!(shown(&c), [triple("my_server__x", "my server", "x")]);
        assert_eq!(
            c.route_tool("my_server__x").map(|t| t.server.as_str()),
            Some("my server")
        );
    }

    #[test]
    fn two_servers_whose_names_map_alike_collide_and_the_later_in_config_order_gets_a_suffix() {
        let mut c = catalog(Namespace::default(), &["my server", "my_server"]);
        c.set_tools("my_server", tools(&["x"]));
        c.set_tools("my server", tools(&["x"]));
        assert_eq!(
            shown(&c),
            [
                triple("my_server__x", "my server", "x"),
                triple("my_server__x-2", "my_server", "x"),
            ]
        );
        assert_eq!(
            c.collisions(),
            [Collision {
                kind: EntryKind::Tool,
                server: "my_server".into(),
                name: "x".into(),
                wanted: "my_server__x".into(),
                shown: Some("my_server__x-2".into()),
                reason: CollisionReason::Taken {
                    by: "my server".into()
                },
            }]
        );
        assert_eq!(
            c.collisions()[0].to_string(),
            "tool `x` of server `my_server`: `my_server__x` is taken by server `my server`; \
             shown as `my_server__x-2`"
        );
        let routed = c.route_tool("my_server__x-2").expect("routed");
        assert_eq!(
            (routed.server.as_str(), routed.tool.name.as_str()),
            ("my_server", "x")
        );
    }

    #[test]
    fn on_collision_keeps_names_unless_two_servers_give_the_same_one() {
        let mut c = catalog(Namespace::on_collision(), &["a", "b"]);
        assert!(c.set_tools("a", tools(&["echo", "add"])));
        assert_eq!(
            shown(&c),
            [triple("echo", "a", "echo"), triple("add", "a", "add")]
        );
        // A second server giving `echo`: both are prefixed, `add` and `sub` stay plain.
        assert!(c.set_tools("b", tools(&["echo", "sub"])));
        assert_eq!(
            shown(&c),
            [
                triple("a__echo", "a", "echo"),
                triple("add", "a", "add"),
                triple("b__echo", "b", "echo"),
                triple("sub", "b", "sub"),
            ]
        );
        assert!(c.route_tool("echo").is_none());
        assert_eq!(
            c.route_tool("b__echo").map(|t| t.server.as_str()),
            Some("b")
        );
        assert!(
            c.collisions().is_empty(),
            "prefixing is the rule, not a collision"
        );
        // It goes away: the names are plain again.
        let changed = c.clear("b");
        assert!(changed.tools && !changed.prompts && changed.any());
        assert_eq!(
            shown(&c),
            [triple("echo", "a", "echo"), triple("add", "a", "add")]
        );
    }

    #[test]
    fn on_collision_applies_to_prompts_too() {
        let mut c = catalog(Namespace::on_collision(), &["a", "b"]);
        c.set_prompts("a", vec![prompt("greet"), prompt("only_a")]);
        c.set_prompts("b", vec![prompt("greet")]);
        let names: Vec<String> = c.prompts().into_iter().map(|p| p.name).collect();
        assert_eq!(names, ["a__greet", "only_a", "b__greet"]);
        let routed = c.route_prompt("b__greet").expect("routed");
        assert_eq!(
            (routed.server.as_str(), routed.prompt.name.as_str()),
            ("b", "greet")
        );
        assert_eq!(
            c.route_prompt("only_a").map(|p| p.server.as_str()),
            Some("a")
        );
    }

    #[test]
    fn on_collision_with_a_raw_name_equal_to_a_prefixed_one_renames_the_later() {
        // `b` lists a tool literally named `a__x`, and `a` and `b` both give `x`.
        let mut c = catalog(Namespace::on_collision(), &["a", "b"]);
        c.set_tools("b", tools(&["a__x", "x"]));
        c.set_tools("a", tools(&["x"]));
        assert_eq!(
            shown(&c),
            [
                triple("a__x", "a", "x"),
                triple("a__x-2", "b", "a__x"),
                triple("b__x", "b", "x"),
            ]
        );
        assert_eq!(c.collisions().len(), 1);
        assert_eq!(
            c.collisions()[0].reason,
            CollisionReason::Taken { by: "a".into() }
        );
    }

    #[test]
    fn a_custom_namespace_names_with_the_config_name_as_written() {
        let mut c = catalog(
            Namespace::custom(|server, name| format!("{name}@{server}")),
            &["my server"],
        );
        c.set_tools("my server", tools(&["x"]));
        assert_eq!(shown(&c), [triple("x@my server", "my server", "x")]);
    }

    #[test]
    fn a_custom_namespace_that_merges_names_gets_suffixes_that_no_entry_wants() {
        // Every tool shown under its own name: `x` of `b` collides with `x` of `a`, and `x-2`
        // is wanted by `a`'s own `x-2`, so `b`'s `x` becomes `x-3`.
        let mut c = catalog(Namespace::custom(|_, name| name.to_owned()), &["a", "b"]);
        c.set_tools("b", tools(&["x"]));
        c.set_tools("a", tools(&["x", "x-2"]));
        assert_eq!(
            shown(&c),
            [
                triple("x", "a", "x"),
                triple("x-2", "a", "x-2"),
                triple("x-3", "b", "x"),
            ]
        );
        // Within one server, two own names mapped to one shown name: the second is renamed.
        let mut c = catalog(Namespace::custom(|_, name| name.to_lowercase()), &["a"]);
        c.set_tools("a", tools(&["Find", "find"]));
        assert_eq!(
            shown(&c),
            [triple("find", "a", "Find"), triple("find-2", "a", "find")]
        );
        assert_eq!(
            c.collisions()[0].reason,
            CollisionReason::Taken { by: "a".into() }
        );
    }

    #[test]
    fn a_server_listing_a_name_twice_has_the_second_left_out_and_reported() {
        for namespace in [Namespace::prefixed(), Namespace::on_collision()] {
            let mut c = catalog(namespace, &["a"]);
            let mut second = tool("x");
            second.description = Some("the second".into());
            c.set_tools("a", vec![tool("x"), second]);
            let tools = c.tools();
            assert_eq!(tools.len(), 1);
            assert_eq!(tools[0].tool.description, None, "the first is shown");
            let shown_name = tools[0].name.clone();
            assert_eq!(c.route_tool(&shown_name).map(|t| &t.tool), Some(&tool("x")));
            assert_eq!(
                c.collisions(),
                [Collision {
                    kind: EntryKind::Tool,
                    server: "a".into(),
                    name: "x".into(),
                    wanted: shown_name,
                    shown: None,
                    reason: CollisionReason::Duplicate,
                }]
            );
            assert!(c.collisions()[0].to_string().ends_with("; left out"));
        }
    }

    #[test]
    fn a_name_over_128_characters_is_shortened_with_a_hash_and_reported() {
        let long_a = format!("{}a", "t".repeat(130));
        let long_b = format!("{}b", "t".repeat(130));
        let mut c = catalog(Namespace::default(), &["srv"]);
        c.set_tools("srv", tools(&[&long_a, &long_b]));
        let tools = c.tools();
        assert_eq!(tools.len(), 2);
        for t in &tools {
            assert_eq!(t.name.chars().count(), MAX_NAME_CHARS);
            assert!(t.name.starts_with("srv__ttt"));
            assert_eq!(c.route_tool(&t.name), Some(t));
        }
        assert_ne!(tools[0].name, tools[1].name, "the hash tells them apart");
        assert_eq!(tools[0].tool.name, long_a);
        let collisions = c.collisions();
        assert_eq!(collisions.len(), 2);
        assert_eq!(collisions[0].reason, CollisionReason::TooLong);
        assert_eq!(collisions[0].wanted, format!("srv__{long_a}"));
        assert_eq!(collisions[0].shown.as_deref(), Some(tools[0].name.as_str()));
        // Stable: the same name gives the same short name (FNV-1a, no random seed).
        assert_eq!(fit(&format!("srv__{long_a}")), tools[0].name);
        assert_eq!(fit(&"x".repeat(128)), "x".repeat(128));
    }

    #[test]
    fn a_suffix_keeps_a_renamed_name_within_128_characters() {
        let own = "y".repeat(126);
        let mut c = catalog(Namespace::custom(|_, name| name.to_owned()), &["a", "b"]);
        c.set_tools("a", tools(&[&own]));
        c.set_tools("b", tools(&[&own]));
        let tools = c.tools();
        assert_eq!(tools[1].name, format!("{}-2", "y".repeat(126)));
        let own = "z".repeat(128);
        let mut c = catalog(Namespace::custom(|_, name| name.to_owned()), &["a", "b"]);
        c.set_tools("a", tools_of(&own));
        c.set_tools("b", tools_of(&own));
        let tools = c.tools();
        assert_eq!(tools[0].name, own);
        assert_eq!(tools[1].name, format!("{}-2", "z".repeat(126)));
        assert_eq!(tools[1].name.len(), MAX_NAME_CHARS);

        fn tools_of(name: &str) -> Vec<model::Tool> {
            vec![tool(name)]
        }
    }

    /// Every way of reaching the same lists, for the stability tests.
    fn arrive(namespace: &Namespace, steps: &[(&str, &[&str])]) -> Catalog {
        let mut c = catalog(namespace.clone(), &["a", "b", "c"]);
        for (server, names) in steps {
            if names.is_empty() {
                c.clear(server);
            } else {
                c.set_tools(server, tools(names));
                c.set_prompts(server, names.iter().map(|n| prompt(n)).collect());
                c.set_resources(
                    server,
                    names
                        .iter()
                        .map(|n| resource(&format!("mem://{n}")))
                        .collect(),
                );
            }
        }
        c
    }

    #[test]
    fn names_do_not_depend_on_the_order_servers_connected_or_refreshed_in() {
        let a: &[&str] = &["x", "y", "x"];
        let b: &[&str] = &["x", "z"];
        let c: &[&str] = &["y", "w"];
        let orders: [&[(&str, &[&str])]; 4] = [
            &[("a", a), ("b", b), ("c", c)],
            &[("c", c), ("b", b), ("a", a)],
            &[("b", b), ("a", &["old"]), ("c", c), ("a", a)],
            &[("c", &["w"]), ("a", a), ("b", b), ("c", &[]), ("c", c)],
        ];
        let namespaces = [
            Namespace::prefixed(),
            Namespace::on_collision(),
            Namespace::custom(|_, name| name.to_owned()),
        ];
        for namespace in &namespaces {
            let first = arrive(namespace, orders[0]);
            for order in &orders[1..] {
                let other = arrive(namespace, order);
                assert_eq!(other.tools(), first.tools(), "{namespace:?} {order:?}");
                assert_eq!(other.prompts(), first.prompts());
                assert_eq!(other.resources(), first.resources());
                assert_eq!(other.collisions(), first.collisions());
                for t in first.tools() {
                    assert_eq!(other.route_tool(&t.name), Some(&t));
                }
            }
        }
        // And the order is the config's: ties go to `a`.
        let custom = arrive(&namespaces[2], orders[1]);
        assert_eq!(custom.route_tool("x").map(|t| t.server.as_str()), Some("a"));
        assert_eq!(custom.route_tool("y").map(|t| t.server.as_str()), Some("a"));
        assert_eq!(
            custom.route_tool("y-2").map(|t| t.server.as_str()),
            Some("c")
        );
    }

    #[test]
    fn servers_the_config_does_not_name_come_after_it_by_name() {
        let mut c = catalog(Namespace::custom(|_, name| name.to_owned()), &["z"]);
        c.set_tools("m", tools(&["x"]));
        c.set_tools("b", tools(&["x"]));
        c.set_tools("z", tools(&["x"]));
        assert_eq!(
            shown(&c),
            [
                triple("x", "z", "x"),
                triple("x-2", "b", "x"),
                triple("x-3", "m", "x"),
            ]
        );
    }

    #[test]
    fn set_reports_a_change_only_when_the_aggregate_changed() {
        let mut c = catalog(Namespace::default(), &["a", "b"]);
        assert!(!c.set_tools("a", vec![]), "an empty list adds nothing");
        assert!(c.set_tools("a", tools(&["x"])));
        assert!(!c.set_tools("a", tools(&["x"])), "an equal list");
        let mut described = tool("x");
        described.description = Some("now described".into());
        assert!(c.set_tools("a", vec![described.clone()]), "a changed tool");
        assert!(
            c.set_tools("a", vec![tool("y"), described.clone()]),
            "a new one"
        );
        assert!(c.set_tools("a", vec![described, tool("y")]), "the order");
        // A duplicate that is left out changes nothing shown.
        let before = c.tools();
        let mut with_dup = before.iter().map(|t| t.tool.clone()).collect::<Vec<_>>();
        with_dup.push(tool("y"));
        assert!(!c.set_tools("a", with_dup));
        assert_eq!(c.tools(), before);
        assert_eq!(c.collisions().len(), 1);

        assert!(!c.set_prompts("b", vec![]));
        assert!(c.set_prompts("b", vec![prompt("p")]));
        assert!(!c.set_prompts("b", vec![prompt("p")]));
        assert!(!c.set_resources("b", vec![]));
        assert!(c.set_resources("b", vec![resource("mem://1")]));
        assert!(!c.set_resources("b", vec![resource("mem://1")]));
        assert!(!c.set_templates("b", vec![]));
        assert!(c.set_templates("b", vec![template("mem://{id}")]));
        assert!(!c.set_templates("b", vec![template("mem://{id}")]));
        assert!(c.set_templates("b", vec![template("mem://{+id}")]));
    }

    #[test]
    fn a_list_of_one_server_can_rename_and_so_change_the_tools_of_another() {
        let mut c = catalog(Namespace::on_collision(), &["a", "b"]);
        c.set_tools("a", tools(&["x"]));
        c.set_tools("b", tools(&["y"]));
        // `b` now also gives `x`: `a`'s tool is renamed, a change of the aggregate.
        assert!(c.set_tools("b", tools(&["y", "x"])));
        assert_eq!(c.route_tool("a__x").map(|t| t.server.as_str()), Some("a"));
    }

    #[test]
    fn a_resource_listed_by_two_servers_is_read_from_the_first_in_config_order() {
        let mut c = catalog(Namespace::default(), &["a", "b"]);
        c.set_resources("b", vec![resource("mem://shared"), resource("mem://b")]);
        assert_eq!(c.route_resource("mem://shared"), Some("b"));
        assert!(c.set_resources("a", vec![resource("mem://shared")]));
        let uris: Vec<(String, String)> = c
            .resources()
            .into_iter()
            .map(|r| (r.server, r.resource.uri))
            .collect();
        assert_eq!(
            uris,
            [
                ("a".to_string(), "mem://shared".to_string()),
                ("b".into(), "mem://b".into()),
            ]
        );
        assert_eq!(c.route_resource("mem://shared"), Some("a"));
        assert_eq!(c.route_resource("mem://b"), Some("b"));
        assert_eq!(
            c.collisions(),
            [Collision {
                kind: EntryKind::Resource,
                server: "b".into(),
                name: "mem://shared".into(),
                wanted: "mem://shared".into(),
                shown: None,
                reason: CollisionReason::Taken { by: "a".into() },
            }]
        );
        // `a` goes away: `b` answers again.
        let changed = c.clear("a");
        assert!(changed.resources && !changed.tools && !changed.templates);
        assert_eq!(c.route_resource("mem://shared"), Some("b"));
        assert!(c.collisions().is_empty());
    }

    #[test]
    fn templates_are_all_kept_with_their_server_and_route_reads_in_config_order() {
        let mut c = catalog(Namespace::default(), &["a", "b", "c"]);
        c.set_templates("c", vec![template("file:///{+path}")]);
        c.set_templates("b", vec![template("db://tables{/table,column}")]);
        c.set_templates(
            "a",
            vec![template("file:///{+path}"), template("mem://{id}")],
        );
        let listed: Vec<(String, String)> = c
            .templates()
            .into_iter()
            .map(|t| (t.server, t.template.uri_template))
            .collect();
        assert_eq!(
            listed,
            [
                ("a".to_string(), "file:///{+path}".to_string()),
                ("a".into(), "mem://{id}".into()),
                ("b".into(), "db://tables{/table,column}".into()),
                ("c".into(), "file:///{+path}".into()),
            ]
        );
        assert_eq!(c.route_resource("file:///etc/hosts"), Some("a"));
        assert_eq!(c.route_resource("mem://42"), Some("a"));
        assert_eq!(c.route_resource("db://tables/users/id"), Some("b"));
        assert_eq!(c.route_resource("db://tables/users/id/more"), None);
        assert_eq!(
            c.route_resource("https://example.com/"),
            None,
            "three declare resources"
        );
        c.clear("a");
        assert_eq!(c.route_resource("file:///etc/hosts"), Some("c"));
        assert!(c.clear("c").templates);
        assert!(!c.clear("c").any(), "already gone");
    }

    #[test]
    fn a_listed_uri_goes_before_a_template_of_an_earlier_server() {
        let mut c = catalog(Namespace::default(), &["a", "b"]);
        c.set_templates("a", vec![template("mem://{id}")]);
        c.set_resources("b", vec![resource("mem://7")]);
        assert_eq!(c.route_resource("mem://7"), Some("b"));
        assert_eq!(c.route_resource("mem://8"), Some("a"));
    }

    #[test]
    fn an_unmatched_uri_goes_to_the_only_server_that_declares_resources() {
        let mut c = catalog(Namespace::default(), &["a", "b"]);
        assert_eq!(
            c.route_resource("mem://x"),
            None,
            "nobody declares resources"
        );
        c.set_tools("b", tools(&["t"]));
        c.set_resources("a", vec![]);
        assert_eq!(c.route_resource("mem://x"), Some("a"));
        c.set_templates("a", vec![template("other://{id}")]);
        assert_eq!(
            c.route_resource("mem://x"),
            Some("a"),
            "resources and templates: one server"
        );
        c.set_templates("b", vec![]);
        assert_eq!(
            c.route_resource("mem://x"),
            None,
            "two servers declare resources"
        );
        c.clear("a");
        assert_eq!(c.route_resource("mem://x"), Some("b"));
    }

    #[test]
    fn the_catalog_holds_what_the_servers_list_and_nothing_more() {
        let mut c = catalog(Namespace::on_collision(), &["a", "b"]);
        let size = |c: &Catalog| {
            let lists = |t: &Table<HostTool>| {
                t.lists
                    .values()
                    .map(|l| l.entries.len() + l.shown.len())
                    .sum::<usize>()
            };
            (
                lists(&c.tools),
                c.tools.index.len(),
                c.tools.collisions.len(),
                c.prompts.lists.len() + c.prompts.index.len() + c.prompts.collisions.len(),
                c.resources
                    .lists
                    .values()
                    .map(|l| l.entries.len())
                    .sum::<usize>()
                    + c.resources.index.len()
                    + c.resources.collisions.len(),
                c.templates
                    .values()
                    .map(|t| t.entries.len() + t.parsed.len())
                    .sum::<usize>(),
            )
        };
        let fill = |c: &mut Catalog, round: usize| {
            for server in ["a", "b"] {
                let names: Vec<String> =
                    (0..10).map(|i| format!("t{}", (i + round) % 12)).collect();
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                c.set_tools(server, tools(&names));
                c.set_prompts(server, names.iter().map(|n| prompt(n)).collect());
                c.set_resources(
                    server,
                    names
                        .iter()
                        .map(|n| resource(&format!("mem://{n}")))
                        .collect(),
                );
                c.set_templates(server, vec![template(&format!("{server}://{{id}}"))]);
            }
        };
        fill(&mut c, 0);
        let first = size(&c);
        assert_eq!(first.0, 2 * 2 * 10);
        for round in 1..200 {
            fill(&mut c, round);
            assert_eq!(size(&c), first, "round {round}");
        }
        c.clear("a");
        c.clear("b");
        assert_eq!(size(&c), (0, 0, 0, 0, 0, 0));
        assert!(c.tools().is_empty() && c.collisions().is_empty());
        assert_eq!(c.route_resource("a://1"), None);
    }

    mod uri_templates {
        use super::super::uri_template::Template;

        fn matches(template: &str, uri: &str) -> bool {
            Template::parse(template)
                .unwrap_or_else(|| panic!("{template} parses"))
                .matches(uri)
        }

        #[test]
        fn a_simple_variable_takes_a_run_without_slash_question_mark_or_hash() {
            assert!(matches("mem://{id}", "mem://42"));
            assert!(matches("mem://{id}", "mem://"), "an empty value");
            assert!(matches("mem://{id}", "mem://a%20b,c:d@e"));
            assert!(!matches("mem://{id}", "mem://a/b"));
            assert!(!matches("mem://{id}", "mem://a?b"));
            assert!(!matches("mem://{id}", "other://42"));
            assert!(matches(
                "users://{user}/posts/{post}",
                "users://ann/posts/7"
            ));
            assert!(!matches(
                "users://{user}/posts/{post}",
                "users://ann/comments/7"
            ));
            assert!(matches("mem://{a,b}", "mem://1,2"));
            assert!(matches("mem://{x:3}", "mem://abc"));
        }

        #[test]
        fn reserved_expansion_takes_slashes_and_fragment_expansion_starts_at_a_hash() {
            assert!(matches("file:///{+path}", "file:///a/b/c.txt"));
            assert!(!matches("file:///{path}", "file:///a/b/c.txt"));
            assert!(matches("file:///{+path}/here", "file:///foo/bar/here"));
            assert!(matches("doc://x{#section}", "doc://x"));
            assert!(matches("doc://x{#section}", "doc://x#a/b"));
            assert!(!matches("doc://x{#section}", "doc://xa"));
        }

        #[test]
        fn path_and_label_expressions_take_one_segment_per_variable_unless_exploded() {
            let t = "db://tables{/table,column}";
            for uri in ["db://tables", "db://tables/users", "db://tables/users/id"] {
                assert!(matches(t, uri), "{uri}");
            }
            assert!(!matches(t, "db://tables/users/id/x"));
            assert!(matches("db://t{/path*}", "db://t/a/b/c/d"));
            assert!(matches("db://t{/path*}/end", "db://t/a/b/end"));
            assert!(matches("host://www{.domain}", "host://www.example"));
            assert!(!matches("host://www{.domain}", "host://www.example.com"));
            assert!(matches("host://www{.domain*}", "host://www.example.com"));
            assert!(matches("m://x{;a,b}", "m://x;a=1;b=2"));
            assert!(!matches("m://x{;a}", "m://x;a=1;b=2"));
        }

        #[test]
        fn query_expressions_are_optional_and_run_to_a_hash() {
            let t = "search://items{?q,limit}";
            assert!(matches(t, "search://items"));
            assert!(matches(t, "search://items?q=rust&limit=3"));
            assert!(!matches(t, "search://items&q=1"));
            assert!(matches("s://i{?q}{&page}", "s://i?q=1&page=2"));
            assert!(matches("s://i?fixed=1{&page}", "s://i?fixed=1&page=2"));
            assert!(matches("s://i{?q}{#f}", "s://i?q=1#top"));
        }

        #[test]
        fn literals_match_exactly_and_pct_triplets_in_either_case() {
            assert!(matches("a%2Fb://{x}", "a%2fb://1"));
            assert!(matches("a%2fb://{x}", "a%2Fb://1"));
            assert!(!matches("a%2Fb://{x}", "a/b://1"));
            assert!(matches("ü://{x}", "ü://1"));
            assert!(matches("plain://fixed", "plain://fixed"));
            assert!(!matches("plain://fixed", "plain://fixed2"));
            assert!(!matches("plain://fixed", "plain://fixe"));
        }

        #[test]
        fn templates_this_matcher_does_not_read_are_not_compiled() {
            for bad in [
                "m://{",
                "m://{}",
                "m://}",
                "m://{=x}",
                "m://{x,}",
                "m://{.x.}",
                "m://{x y}",
                "m://{x:0}",
                "m://{x:12345}",
                "m://{x*:3}",
                "m://%zz",
                "m://%2",
            ] {
                assert!(Template::parse(bad).is_none(), "{bad}");
            }
            assert!(Template::parse(&"a".repeat(5000)).is_none());
            assert!(Template::parse("m://{a.b,%41}").is_some());
        }

        #[test]
        fn a_long_hostile_uri_is_matched_in_one_pass() {
            let t = Template::parse("x://{a}{b}{c}{+d}{/e*}{?f}end").expect("parses");
            let uri = format!("x://{}", "a/".repeat(100_000));
            let start = std::time::Instant::now();
            assert!(!t.matches(&uri));
            assert!(start.elapsed() < std::time::Duration::from_secs(5));
        }
    }
}
