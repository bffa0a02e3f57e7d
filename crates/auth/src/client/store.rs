//! Where the client keeps what it must not lose between requests or runs: its registration at
//! each authorization server and the tokens it got for each resource.
//!
//! [`TokenStore`] is the seam; [`MemoryStore`] (the default) keeps everything for the life of the
//! process, [`FileStore`] on disk for command-line tools: one JSON file per authorization server,
//! readable by the user alone.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::fetch::BoxFuture;

/// The largest store file [`FileStore`] reads (1 MiB): an issuer's registration and the tokens of
/// dozens of resources fit many times over; a larger file is refused ([`StoreError::TooLarge`]).
pub const MAX_FILE_SIZE: u64 = 1 << 20;

/// Keeps the client's registrations and tokens, by [`StoreKey`].
///
/// The OAuth client loads what it needs before a flow and saves what a flow, a refresh or a
/// registration gave. Implementations must keep secrets out of logs (the records' `Debug` already
/// does) and may be shared by several clients. Each method is one whole operation: a `save`
/// replaces the record under its key and leaves the others alone.
pub trait TokenStore: Send + Sync + fmt::Debug + 'static {
    /// The record under `key`, if any.
    fn load<'a>(&'a self, key: &'a StoreKey) -> BoxFuture<'a, Result<Option<Stored>, StoreError>>;

    /// Keeps `value` under `key`, replacing what was there. The value must be of the key's kind
    /// ([`StoreError::WrongKind`] otherwise).
    fn save<'a>(
        &'a self,
        key: &'a StoreKey,
        value: &'a Stored,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Forgets the record under `key` (nothing happens when there is none).
    fn remove<'a>(&'a self, key: &'a StoreKey) -> BoxFuture<'a, Result<(), StoreError>>;

    /// The keys of every record kept, in order (issuer, then registration before tokens, then
    /// resource).
    fn list<'a>(&'a self) -> BoxFuture<'a, Result<Vec<StoreKey>, StoreError>>;
}

/// What a record is kept under.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum StoreKey {
    /// The client's registration at the authorization server `issuer` (credentials are kept per
    /// issuer and never shown to another).
    Client {
        /// The authorization server's issuer identifier, exactly as its metadata names it.
        issuer: String,
    },
    /// The tokens `issuer` gave for `resource`.
    Tokens {
        /// The authorization server's issuer identifier.
        issuer: String,
        /// The RFC 8707 resource the tokens are for (the protected resource metadata's
        /// `resource`, as published).
        resource: String,
    },
}

impl StoreKey {
    /// The key of the registration at `issuer`.
    pub fn client(issuer: impl Into<String>) -> StoreKey {
        StoreKey::Client {
            issuer: issuer.into(),
        }
    }

    /// The key of the tokens `issuer` gave for `resource`.
    pub fn tokens(issuer: impl Into<String>, resource: impl Into<String>) -> StoreKey {
        StoreKey::Tokens {
            issuer: issuer.into(),
            resource: resource.into(),
        }
    }

    /// The authorization server the record belongs to.
    pub fn issuer(&self) -> &str {
        match self {
            StoreKey::Client { issuer } | StoreKey::Tokens { issuer, .. } => issuer,
        }
    }

    /// Whether `value` is of this key's kind.
    fn fits(&self, value: &Stored) -> bool {
        matches!(
            (self, value),
            (StoreKey::Client { .. }, Stored::Client(_))
                | (StoreKey::Tokens { .. }, Stored::Tokens(_))
        )
    }
}

/// A record: a registration, or tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Stored {
    /// Under [`StoreKey::Client`].
    Client(ClientRecord),
    /// Under [`StoreKey::Tokens`].
    Tokens(TokenRecord),
}

/// The client's identity at one authorization server: what registration (or the application's
/// pre-registration) gave. `Debug` shows no secret.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ClientRecord {
    /// The `client_id`.
    pub client_id: String,
    /// The `client_secret`, for a confidential client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    /// How the client authenticates at the token endpoint (`none`, `client_secret_basic`,
    /// `client_secret_post`, `private_key_jwt`).
    pub token_endpoint_auth_method: String,
    /// The redirect URIs registered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub redirect_uris: Vec<String>,
    /// When it was registered, in seconds since the Unix epoch; `None`: unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registered_at: Option<u64>,
}

impl ClientRecord {
    /// A client `client_id` authenticating with `method`, with no secret, no redirect URI and no
    /// registration time.
    pub fn new(client_id: impl Into<String>, method: impl Into<String>) -> ClientRecord {
        ClientRecord {
            client_id: client_id.into(),
            client_secret: None,
            token_endpoint_auth_method: method.into(),
            redirect_uris: Vec::new(),
            registered_at: None,
        }
    }
}

impl fmt::Debug for ClientRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientRecord")
            .field("client_id", &self.client_id)
            .field("client_secret", &redacted(self.client_secret.is_some()))
            .field(
                "token_endpoint_auth_method",
                &self.token_endpoint_auth_method,
            )
            .field("redirect_uris", &self.redirect_uris)
            .field("registered_at", &self.registered_at)
            .finish()
    }
}

/// The tokens of one resource from one authorization server. `Debug` shows no token and no key.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TokenRecord {
    /// The access token.
    pub access_token: String,
    /// Its type as the token endpoint said it (`Bearer` or `DPoP`).
    pub token_type: String,
    /// When the access token expires, in seconds since the Unix epoch; `None`: unknown (the
    /// token endpoint gave no `expires_in`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
    /// The refresh token, when one was issued.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<String>,
    /// The scopes asked for (a step-up asks for their union with more).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes_requested: Vec<String>,
    /// The scopes granted, as the token endpoint said (the requested ones when it did not say).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes_granted: Vec<String>,
    /// The DPoP private key the tokens are bound to, PKCS#8 DER (a refresh token of a public
    /// client is bound to it); `None` for bearer tokens. Kept as base64url in files.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "base64url_option"
    )]
    pub dpop_key: Option<Vec<u8>>,
}

impl TokenRecord {
    /// An access token of `token_type`, with no expiry, refresh token, scopes or key.
    pub fn new(access_token: impl Into<String>, token_type: impl Into<String>) -> TokenRecord {
        TokenRecord {
            access_token: access_token.into(),
            token_type: token_type.into(),
            expires_at: None,
            refresh_token: None,
            scopes_requested: Vec::new(),
            scopes_granted: Vec::new(),
            dpop_key: None,
        }
    }
}

impl fmt::Debug for TokenRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenRecord")
            .field("access_token", &redacted(true))
            .field("token_type", &self.token_type)
            .field("expires_at", &self.expires_at)
            .field("refresh_token", &redacted(self.refresh_token.is_some()))
            .field("scopes_requested", &self.scopes_requested)
            .field("scopes_granted", &self.scopes_granted)
            .field("dpop_key", &redacted(self.dpop_key.is_some()))
            .finish()
    }
}

/// How a secret shows in `Debug`: that it is there, never what it is.
fn redacted(present: bool) -> Option<&'static str> {
    present.then_some("<redacted>")
}

/// `Option<Vec<u8>>` as an optional base64url string (no padding).
mod base64url_option {
    use base64::Engine as _;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(
        value: &Option<Vec<u8>>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(bytes) => serializer.serialize_str(&URL_SAFE_NO_PAD.encode(bytes)),
            None => serializer.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Vec<u8>>, D::Error> {
        Option::<String>::deserialize(deserializer)?
            .map(|text| {
                URL_SAFE_NO_PAD
                    .decode(text.as_bytes())
                    .map_err(serde::de::Error::custom)
            })
            .transpose()
    }
}

/// Why a store could not load, save or remove a record.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// Reading or writing the store failed.
    #[error("token store {}: {source}", .path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A store file or directory may be read or written by others than its owner: it is not
    /// used (files must be `0600`, the directory `0700`).
    #[error(
        "token store {} has mode {mode:o}: others than its owner may read or change it (files must be 600, the directory 700)",
        .path.display()
    )]
    Permissions {
        /// The file or directory.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// A store file is larger than [`MAX_FILE_SIZE`]: it is not read.
    #[error("token store file {} is larger than {limit} bytes", .path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The bound.
        limit: u64,
    },
    /// A store file is not what the store writes (not its JSON, another issuer's records, not a
    /// regular file).
    #[error("token store file {} is not usable: {why}", .path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// A record was saved under a key of the other kind (tokens under a registration's key, or
    /// the reverse).
    #[error("a record of the wrong kind was saved under {key:?}")]
    WrongKind {
        /// The key.
        key: StoreKey,
    },
}

/// Keeps the records in memory, for the life of the process (the default store). Clones share
/// the records.
#[derive(Clone, Default)]
pub struct MemoryStore {
    records: Arc<Mutex<HashMap<StoreKey, Stored>>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    fn records(&self) -> std::sync::MutexGuard<'_, HashMap<StoreKey, Stored>> {
        self.records.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Shows how many records it holds, never what they are.
impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore")
            .field("records", &self.records().len())
            .finish()
    }
}

impl TokenStore for MemoryStore {
    fn load<'a>(&'a self, key: &'a StoreKey) -> BoxFuture<'a, Result<Option<Stored>, StoreError>> {
        let found = self.records().get(key).cloned();
        Box::pin(std::future::ready(Ok(found)))
    }

    fn save<'a>(
        &'a self,
        key: &'a StoreKey,
        value: &'a Stored,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let result = if key.fits(value) {
            self.records().insert(key.clone(), value.clone());
            Ok(())
        } else {
            Err(StoreError::WrongKind { key: key.clone() })
        };
        Box::pin(std::future::ready(result))
    }

    fn remove<'a>(&'a self, key: &'a StoreKey) -> BoxFuture<'a, Result<(), StoreError>> {
        self.records().remove(key);
        Box::pin(std::future::ready(Ok(())))
    }

    fn list<'a>(&'a self) -> BoxFuture<'a, Result<Vec<StoreKey>, StoreError>> {
        let mut keys: Vec<StoreKey> = self.records().keys().cloned().collect();
        keys.sort();
        Box::pin(std::future::ready(Ok(keys)))
    }
}

/// Keeps the records in a directory, one JSON file per authorization server: for command-line
/// tools, whose runs share the user's logins.
///
/// Each issuer's registration and tokens are in `<dir>/<h>.json`, `<h>` being the first 16 hex
/// digits of the SHA-256 of the issuer identifier, as `{"issuer", "client", "tokens":
/// {resource: ...}}`. On Unix the directory is created with mode `0700` and each file is
/// written with mode `0600` to a temporary name in the same directory, flushed, then renamed
/// over the old one: a reader sees the old file or the new one, never a part. A file or
/// directory that others than its owner may read or change is refused
/// ([`StoreError::Permissions`]), as is a file larger than [`MAX_FILE_SIZE`]. Elsewhere
/// (Windows) the files get the permissions of the directory (`%APPDATA%` is the user's alone).
///
/// Within a process the operations are serialised; between processes the last writer wins.
/// The work is done on tokio's blocking threads.
#[derive(Clone)]
pub struct FileStore {
    dir: PathBuf,
    /// Serialises the read-modify-write of the files.
    lock: Arc<Mutex<()>>,
}

/// Shows the directory.
impl fmt::Debug for FileStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileStore").field("dir", &self.dir).finish()
    }
}

/// One issuer's file.
#[derive(Serialize, Deserialize)]
struct IssuerFile {
    issuer: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    client: Option<ClientRecord>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    tokens: BTreeMap<String, TokenRecord>,
}

impl IssuerFile {
    fn is_empty(&self) -> bool {
        self.client.is_none() && self.tokens.is_empty()
    }
}

/// Numbers the temporary files of this process.
static TEMPORARY: AtomicU64 = AtomicU64::new(0);

impl FileStore {
    /// A store in `dir`, created (with its missing parents) with mode `0700` if it does not
    /// exist. An existing directory must not be open to others ([`StoreError::Permissions`]).
    pub fn new(dir: impl Into<PathBuf>) -> Result<FileStore, StoreError> {
        let dir = dir.into();
        let io = |source| StoreError::Io {
            path: dir.clone(),
            source,
        };
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(&dir).map_err(io)?;
        let metadata = std::fs::metadata(&dir).map_err(io)?;
        if !metadata.is_dir() {
            return Err(io(std::io::Error::other("not a directory")));
        }
        check_private(&dir, &metadata)?;
        Ok(FileStore {
            dir,
            lock: Arc::default(),
        })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file that holds `issuer`'s records.
    pub fn file_of(&self, issuer: &str) -> PathBuf {
        self.dir.join(file_name(issuer))
    }

    /// Runs `work` on a blocking thread, with the store's lock held.
    fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Path) -> Result<T, StoreError> + Send + 'static,
    ) -> BoxFuture<'static, Result<T, StoreError>> {
        let dir = self.dir.clone();
        let lock = self.lock.clone();
        Box::pin(async move {
            let task = tokio::task::spawn_blocking(move || {
                let _held = lock.lock().unwrap_or_else(PoisonError::into_inner);
                work(&dir)
            });
            match task.await {
                Ok(result) => result,
                Err(e) => Err(StoreError::Io {
                    path: PathBuf::new(),
                    source: std::io::Error::other(format!("the store's task failed: {e}")),
                }),
            }
        })
    }
}

impl TokenStore for FileStore {
    fn load<'a>(&'a self, key: &'a StoreKey) -> BoxFuture<'a, Result<Option<Stored>, StoreError>> {
        let key = key.clone();
        self.blocking(move |dir| {
            let Some(file) = read_issuer(dir, key.issuer())? else {
                return Ok(None);
            };
            Ok(match key {
                StoreKey::Client { .. } => file.client.map(Stored::Client),
                StoreKey::Tokens { resource, .. } => {
                    let mut tokens = file.tokens;
                    tokens.remove(&resource).map(Stored::Tokens)
                }
            })
        })
    }

    fn save<'a>(
        &'a self,
        key: &'a StoreKey,
        value: &'a Stored,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        if !key.fits(value) {
            let error = StoreError::WrongKind { key: key.clone() };
            return Box::pin(std::future::ready(Err(error)));
        }
        let key = key.clone();
        let value = value.clone();
        self.blocking(move |dir| {
            let issuer = key.issuer().to_owned();
            let mut file = read_issuer(dir, &issuer)?.unwrap_or(IssuerFile {
                issuer,
                client: None,
                tokens: BTreeMap::new(),
            });
            match (key, value) {
                (StoreKey::Client { .. }, Stored::Client(record)) => file.client = Some(record),
                (StoreKey::Tokens { resource, .. }, Stored::Tokens(record)) => {
                    file.tokens.insert(resource, record);
                }
                (key, _) => return Err(StoreError::WrongKind { key }),
            }
            write_issuer(dir, &file)
        })
    }

    fn remove<'a>(&'a self, key: &'a StoreKey) -> BoxFuture<'a, Result<(), StoreError>> {
        let key = key.clone();
        self.blocking(move |dir| {
            let Some(mut file) = read_issuer(dir, key.issuer())? else {
                return Ok(());
            };
            let removed = match &key {
                StoreKey::Client { .. } => file.client.take().is_some(),
                StoreKey::Tokens { resource, .. } => file.tokens.remove(resource).is_some(),
            };
            if !removed {
                return Ok(());
            }
            if file.is_empty() {
                let path = dir.join(file_name(&file.issuer));
                return std::fs::remove_file(&path)
                    .map_err(|source| StoreError::Io { path, source });
            }
            write_issuer(dir, &file)
        })
    }

    fn list<'a>(&'a self) -> BoxFuture<'a, Result<Vec<StoreKey>, StoreError>> {
        self.blocking(|dir| {
            let io = |source| StoreError::Io {
                path: dir.to_owned(),
                source,
            };
            let mut keys = Vec::new();
            for entry in std::fs::read_dir(dir).map_err(io)? {
                let entry = entry.map_err(io)?;
                let name = entry.file_name();
                let Some(name) = name.to_str().filter(|n| is_store_name(n)) else {
                    continue; // not a store file (a temporary file, or something else)
                };
                let file = read_file(&dir.join(name))?;
                if file.client.is_some() {
                    keys.push(StoreKey::client(file.issuer.clone()));
                }
                for resource in file.tokens.into_keys() {
                    keys.push(StoreKey::tokens(file.issuer.clone(), resource));
                }
            }
            keys.sort();
            Ok(keys)
        })
    }
}

/// `<first 16 hex digits of SHA-256(issuer)>.json`.
fn file_name(issuer: &str) -> String {
    let digest = Sha256::digest(issuer.as_bytes());
    let mut name: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    name.push_str(".json");
    name
}

/// Whether `name` is a store file's name (16 lower-case hex digits and `.json`).
fn is_store_name(name: &str) -> bool {
    name.strip_suffix(".json").is_some_and(|stem| {
        stem.len() == 16 && stem.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// Refuses a file or directory that others than its owner may use (Unix; nothing elsewhere).
fn check_private(path: &Path, metadata: &std::fs::Metadata) -> Result<(), StoreError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = metadata.permissions().mode() & 0o7777;
        if mode & 0o077 != 0 {
            return Err(StoreError::Permissions {
                path: path.to_owned(),
                mode,
            });
        }
    }
    #[cfg(not(unix))]
    let _ = (path, metadata);
    Ok(())
}

/// `issuer`'s file, if there is one; it must be `issuer`'s.
fn read_issuer(dir: &Path, issuer: &str) -> Result<Option<IssuerFile>, StoreError> {
    let path = dir.join(file_name(issuer));
    match std::fs::symlink_metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(StoreError::Io { path, source }),
        Ok(_) => {}
    }
    let file = read_file(&path)?;
    if file.issuer != issuer {
        return Err(StoreError::Corrupt {
            path,
            why: "it holds the records of another issuer".into(),
        });
    }
    Ok(Some(file))
}

/// Reads and parses the store file `path`: a regular file (not a link), private, within
/// [`MAX_FILE_SIZE`].
fn read_file(path: &Path) -> Result<IssuerFile, StoreError> {
    let io = |source| StoreError::Io {
        path: path.to_owned(),
        source,
    };
    if std::fs::symlink_metadata(path)
        .map_err(io)?
        .file_type()
        .is_symlink()
    {
        return Err(StoreError::Corrupt {
            path: path.to_owned(),
            why: "it is a symbolic link".into(),
        });
    }
    let file = std::fs::File::open(path).map_err(io)?;
    // The open file's own metadata: what is read is what was checked.
    let metadata = file.metadata().map_err(io)?;
    if !metadata.is_file() {
        return Err(StoreError::Corrupt {
            path: path.to_owned(),
            why: "it is not a regular file".into(),
        });
    }
    check_private(path, &metadata)?;
    let too_large = || StoreError::TooLarge {
        path: path.to_owned(),
        limit: MAX_FILE_SIZE,
    };
    if metadata.len() > MAX_FILE_SIZE {
        return Err(too_large());
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE_SIZE + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > MAX_FILE_SIZE {
        return Err(too_large());
    }
    serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt {
        path: path.to_owned(),
        why: e.to_string(),
    })
}

/// Writes `file` atomically: to a new private temporary file in the same directory, flushed to
/// disk, then renamed over the old one.
fn write_issuer(dir: &Path, file: &IssuerFile) -> Result<(), StoreError> {
    let path = dir.join(file_name(&file.issuer));
    let bytes = serde_json::to_vec_pretty(file).map_err(|e| StoreError::Corrupt {
        path: path.clone(),
        why: e.to_string(),
    })?;
    let temporary = dir.join(format!(
        ".{}.{}.{}.tmp",
        file_name(&file.issuer),
        std::process::id(),
        TEMPORARY.fetch_add(1, Ordering::Relaxed)
    ));
    let written = (|| {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut out = options.open(&temporary)?;
        out.write_all(&bytes)?;
        out.sync_all()?;
        drop(out);
        std::fs::rename(&temporary, &path)
    })();
    if let Err(source) = written {
        let _ = std::fs::remove_file(&temporary);
        return Err(StoreError::Io { path, source });
    }
    // The rename itself reaches the disk with the directory (best effort: not every platform
    // can open a directory).
    if let Ok(directory) = std::fs::File::open(dir) {
        let _ = directory.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory path under the system's temporary directory (not created), removed
    /// when dropped.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            static NEXT: AtomicU64 = AtomicU64::new(0);
            let path = std::env::temp_dir().join(format!(
                "modelctx-store-{}-{}-{name}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = std::fs::remove_dir_all(&path);
            Scratch(path)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    const AS: &str = "https://as.example.com";
    const OTHER: &str = "https://other.example.com/tenant";

    fn client() -> ClientRecord {
        let mut record = ClientRecord::new("client-1", "client_secret_basic");
        record.client_secret = Some("s3cret-client".into());
        record.redirect_uris = vec!["http://127.0.0.1:3000/callback".into()];
        record.registered_at = Some(1_790_000_000);
        record
    }

    fn tokens(access: &str) -> TokenRecord {
        let mut record = TokenRecord::new(access, "DPoP");
        record.expires_at = Some(1_790_003_600);
        record.refresh_token = Some("s3cret-refresh".into());
        record.scopes_requested = vec!["files:read".into(), "offline_access".into()];
        record.scopes_granted = vec!["files:read".into()];
        record.dpop_key = Some(vec![0x30, 0x81, 0x87, 0xff, 0x00]);
        record
    }

    /// What every store must do: records round trip by key, kinds are checked, removal is of
    /// one record, the list is ordered.
    async fn behaves(store: &dyn TokenStore) {
        let registration = StoreKey::client(AS);
        let mcp = StoreKey::tokens(AS, "https://mcp.example.com/mcp");
        let files = StoreKey::tokens(AS, "https://files.example.com/");
        let elsewhere = StoreKey::tokens(OTHER, "https://mcp.example.com/mcp");
        assert_eq!(store.load(&registration).await.unwrap(), None);
        assert!(store.list().await.unwrap().is_empty());

        store
            .save(&registration, &Stored::Client(client()))
            .await
            .unwrap();
        store
            .save(&mcp, &Stored::Tokens(tokens("s3cret-a")))
            .await
            .unwrap();
        store
            .save(&files, &Stored::Tokens(tokens("s3cret-b")))
            .await
            .unwrap();
        store
            .save(&elsewhere, &Stored::Tokens(tokens("s3cret-c")))
            .await
            .unwrap();
        assert_eq!(
            store.load(&registration).await.unwrap(),
            Some(Stored::Client(client()))
        );
        assert_eq!(
            store.load(&mcp).await.unwrap(),
            Some(Stored::Tokens(tokens("s3cret-a")))
        );
        assert_eq!(
            store.load(&elsewhere).await.unwrap(),
            Some(Stored::Tokens(tokens("s3cret-c")))
        );
        assert_eq!(store.load(&StoreKey::client(OTHER)).await.unwrap(), None);
        // A save replaces the record under its key only.
        store
            .save(&mcp, &Stored::Tokens(tokens("s3cret-a2")))
            .await
            .unwrap();
        assert_eq!(
            store.load(&mcp).await.unwrap(),
            Some(Stored::Tokens(tokens("s3cret-a2")))
        );
        assert_eq!(
            store.load(&files).await.unwrap(),
            Some(Stored::Tokens(tokens("s3cret-b")))
        );
        assert_eq!(
            store.list().await.unwrap(),
            vec![
                registration.clone(),
                files.clone(),
                mcp.clone(),
                elsewhere.clone()
            ]
        );
        // Records of the wrong kind are refused.
        assert!(matches!(
            store.save(&registration, &Stored::Tokens(tokens("x"))).await,
            Err(StoreError::WrongKind { key }) if key == registration
        ));
        assert!(matches!(
            store.save(&mcp, &Stored::Client(client())).await,
            Err(StoreError::WrongKind { .. })
        ));

        store.remove(&mcp).await.unwrap();
        store.remove(&mcp).await.unwrap(); // nothing there: fine
        assert_eq!(store.load(&mcp).await.unwrap(), None);
        assert_eq!(
            store.list().await.unwrap(),
            vec![registration.clone(), files.clone(), elsewhere.clone()]
        );
        store.remove(&registration).await.unwrap();
        store.remove(&files).await.unwrap();
        store.remove(&elsewhere).await.unwrap();
        assert!(store.list().await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn the_memory_store_keeps_records_by_key() {
        let store = MemoryStore::new();
        behaves(&store).await;
        // Clones share the records.
        let key = StoreKey::client(AS);
        store
            .clone()
            .save(&key, &Stored::Client(client()))
            .await
            .unwrap();
        assert!(store.load(&key).await.unwrap().is_some());
    }

    #[tokio::test]
    async fn the_file_store_keeps_records_by_key_one_file_per_issuer() {
        let scratch = Scratch::new("round-trip");
        let store = FileStore::new(scratch.0.join("nested/auth")).unwrap();
        behaves(&store).await;
        // The last record of an issuer gone, its file is gone too.
        assert_eq!(std::fs::read_dir(store.dir()).unwrap().count(), 0);

        store
            .save(
                &StoreKey::tokens(AS, "https://mcp.example.com/mcp"),
                &Stored::Tokens(tokens("t")),
            )
            .await
            .unwrap();
        store
            .save(&StoreKey::client(OTHER), &Stored::Client(client()))
            .await
            .unwrap();
        // One file per issuer, named by the first 16 hex digits of SHA-256(issuer)
        // (`sha256("https://as.example.com")` = 84f862e2cbab3d01...).
        assert_eq!(store.file_of(AS), store.dir().join("84f862e2cbab3d01.json"));
        let mut names: Vec<String> = std::fs::read_dir(store.dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        let mut expected = vec![file_name(AS), file_name(OTHER)];
        expected.sort();
        assert_eq!(names, expected);
        let json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(store.file_of(AS)).unwrap()).unwrap();
        assert_eq!(json["issuer"], AS);
        assert_eq!(
            json["tokens"]["https://mcp.example.com/mcp"]["dpop_key"],
            "MIGH_wA"
        );

        // Another store on the same directory (another run) sees the records.
        let again = FileStore::new(store.dir()).unwrap();
        assert_eq!(
            again.load(&StoreKey::client(OTHER)).await.unwrap(),
            Some(Stored::Client(client()))
        );
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn files_are_private_and_a_file_open_to_others_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        let scratch = Scratch::new("permissions");
        let store = FileStore::new(scratch.0.join("auth")).unwrap();
        assert_eq!(mode(store.dir()), 0o700);
        let key = StoreKey::client(AS);
        store.save(&key, &Stored::Client(client())).await.unwrap();
        let path = store.file_of(AS);
        assert_eq!(mode(&path), 0o600);

        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let refused = store.load(&key).await.unwrap_err();
        assert!(
            matches!(&refused, StoreError::Permissions { path: p, mode: 0o644 } if *p == path),
            "{refused:?}"
        );
        assert!(refused.to_string().contains("mode 644"), "{refused}");
        assert!(matches!(
            store.list().await,
            Err(StoreError::Permissions { .. })
        ));
        // Nor is it written over (its records would be taken for the store's).
        assert!(matches!(
            store.save(&key, &Stored::Client(client())).await,
            Err(StoreError::Permissions { .. })
        ));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(store.load(&key).await.unwrap().is_some());

        // A directory open to others is refused too.
        let open = scratch.0.join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(matches!(
            FileStore::new(&open),
            Err(StoreError::Permissions { mode: 0o755, .. })
        ));
    }

    #[tokio::test]
    async fn files_that_are_not_the_store_s_are_refused() {
        let scratch = Scratch::new("hostile");
        let store = FileStore::new(scratch.0.join("auth")).unwrap();
        let write = |issuer: &str, bytes: &[u8]| {
            let path = store.file_of(issuer);
            let mut options = std::fs::OpenOptions::new();
            options.write(true).create(true).truncate(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
            options.open(&path).unwrap().write_all(bytes).unwrap();
        };
        // Larger than the bound: not read.
        write(AS, &vec![b' '; MAX_FILE_SIZE as usize + 1]);
        assert!(matches!(
            store.load(&StoreKey::client(AS)).await,
            Err(StoreError::TooLarge {
                limit: MAX_FILE_SIZE,
                ..
            })
        ));
        // Not JSON.
        write(AS, b"{\"issuer\": ");
        assert!(matches!(
            store.load(&StoreKey::client(AS)).await,
            Err(StoreError::Corrupt { .. })
        ));
        // Another issuer's records under this issuer's name.
        write(AS, br#"{"issuer": "https://evil.example.com"}"#);
        let error = store.load(&StoreKey::client(AS)).await.unwrap_err();
        assert!(error.to_string().contains("another issuer"), "{error}");
        // Files of other names are not the store's: the list skips them.
        std::fs::remove_file(store.file_of(AS)).unwrap();
        std::fs::write(store.dir().join("notes.txt"), "x").unwrap();
        assert!(store.list().await.unwrap().is_empty());
    }

    /// A reader never sees a part of a file: each write goes to a temporary file renamed over
    /// the old one, and no temporary file stays behind.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writes_are_atomic() {
        let scratch = Scratch::new("atomic");
        let store = FileStore::new(scratch.0.join("auth")).unwrap();
        let key = StoreKey::tokens(AS, "https://mcp.example.com/mcp");
        store
            .save(&key, &Stored::Tokens(tokens("first")))
            .await
            .unwrap();
        let path = store.file_of(AS);
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reader = {
            let stop = stop.clone();
            let path = path.clone();
            std::thread::spawn(move || {
                let mut reads = 0;
                while !stop.load(Ordering::Relaxed) {
                    let bytes = std::fs::read(&path).expect("the file is always there");
                    let file: IssuerFile =
                        serde_json::from_slice(&bytes).expect("a whole file every time");
                    assert_eq!(file.issuer, AS);
                    reads += 1;
                }
                reads
            })
        };
        for round in 0..200 {
            // Sizes that vary a lot, so that a torn write would show.
            let access = "t".repeat(1 + (round % 7) * 5_000);
            store
                .save(&key, &Stored::Tokens(tokens(&access)))
                .await
                .unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        assert!(reader.join().unwrap() > 0);
        let names: Vec<String> = std::fs::read_dir(store.dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, vec![file_name(AS)]);
    }

    #[test]
    fn debug_shows_no_secret() {
        let shown = format!(
            "{:?} {:?} {:?}",
            Stored::Client(client()),
            Stored::Tokens(tokens("s3cret-access")),
            StoreError::WrongKind {
                key: StoreKey::tokens(AS, "r")
            }
        );
        for secret in ["s3cret", "MIGH"] {
            assert!(!shown.contains(secret), "{shown}");
        }
        assert!(
            shown.contains("client-1") && shown.contains("<redacted>"),
            "{shown}"
        );
        assert!(
            shown.contains("DPoP") && shown.contains("files:read"),
            "{shown}"
        );
        let memory = MemoryStore::new();
        memory
            .records()
            .insert(StoreKey::client(AS), Stored::Client(client()));
        assert_eq!(format!("{memory:?}"), "MemoryStore { records: 1 }");
        // Without a secret, none is claimed.
        let public = format!("{:?}", ClientRecord::new("public", "none"));
        assert!(public.contains("client_secret: None"), "{public}");
    }
}
