//! How `mcx` answers the server's own requests, with the client facade's handlers (so a legacy
//! server's requests and a modern server's `input_required` rounds get the same answers):
//!
//! * **Elicitation** (form and URL mode) is always declared. When stdin and stderr are a
//!   terminal, the form is asked on it, field by field ([`form`]): its title and description
//!   shown, the answer checked against the field's type, bounds, format and choices, defaults
//!   offered, required fields insisted on; then `Submit? [Y/n/cancel]` (an empty answer
//!   submits, `n` declines, `cancel` or Ctrl-D at any question cancels). A URL elicitation
//!   shows the URL and asks for consent (mcx opens nothing itself). Off a terminal, every
//!   elicitation is declined with a note on stderr, so a script never waits for an answer.
//!   While a question is asked, the progress bar and log lines are held back
//!   ([`crate::progress::hold`]).
//! * **Roots** are declared only with `--root DIR` (repeatable): `roots/list` is answered with
//!   the canonical paths as `file://` URIs, each named after its directory.
//! * **Sampling** is always declared: with `--sampling-reply TEXT` every request is answered
//!   with that text (model `mcx`, stop reason `endTurn`); without it, refused with the error
//!   [`NO_MODEL`] (to a legacy server; in the modern era the call fails with it), and a note on
//!   stderr either way.
//!
//! The time a question waits for the user does not count against `--timeout`: the client
//! pauses the call's timeout while a handler answers (see `ClientBuilder::request_timeout`).
//!
//! What it does not do: call a model, open a browser, or keep the order in which a server
//! listed the form's fields (they arrive as a JSON object without order: required fields are
//! asked first, each group by name).
//!
//! `--era` is set here too: it is how the client meets the server.

use std::io::{self, BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use modelctx_client::{
    ClientBuilder, Elicitation, Elicited, EraChoice, InputError, JsonObject, model,
};
use serde_json::Value;

use crate::output::escape;
use crate::{EraArg, Target};

/// Why a sampling request is refused without `--sampling-reply`.
pub(crate) const NO_MODEL: &str = "mcx has no model: give --sampling-reply TEXT";

/// The model named in the answers of `--sampling-reply`.
const MODEL: &str = "mcx";

/// Adds to `builder` the era of `--era` and the handlers of the server's requests.
pub(crate) fn install(
    mut builder: ClientBuilder,
    target: &Target,
) -> Result<ClientBuilder, String> {
    match target.era {
        Some(EraArg::Legacy) => builder = builder.era(EraChoice::Legacy),
        Some(EraArg::Modern) => builder = builder.era(EraChoice::Modern),
        None => {}
    }
    if !target.roots.is_empty() {
        builder = builder.roots(roots(&target.roots)?);
    }
    let reply = target.sampling_reply.clone();
    Ok(builder
        .on_elicitation(elicit)
        .url_elicitation()
        .on_sampling(move |params| {
            let answer = sample(reply.as_deref(), &params);
            async move { answer }
        }))
}

// -- roots --------------------------------------------------------------------------------------

/// The roots of `--root`: each directory's canonical path as a `file://` URI, named after it.
pub(crate) fn roots(dirs: &[PathBuf]) -> Result<Vec<model::Root>, String> {
    dirs.iter()
        .map(|dir| {
            let path =
                std::fs::canonicalize(dir).map_err(|e| format!("--root {}: {e}", dir.display()))?;
            if !path.is_dir() {
                return Err(format!("--root {}: not a directory", dir.display()));
            }
            let name = path.file_name().map_or_else(
                || path.display().to_string(),
                |name| name.to_string_lossy().into_owned(),
            );
            Ok(model::Root {
                meta: None,
                name: Some(name),
                uri: file_uri(&path),
            })
        })
        .collect()
}

/// `file://` and the absolute `path`, its bytes outside the unreserved characters and `/`
/// percent-encoded (RFC 8089, RFC 3986).
fn file_uri(path: &Path) -> String {
    #[cfg(unix)]
    let bytes = {
        use std::os::unix::ffi::OsStrExt;
        path.as_os_str().as_bytes().to_vec()
    };
    #[cfg(not(unix))]
    let bytes = {
        let text = path.to_string_lossy();
        // `\\?\C:\dir` (a canonical Windows path) is `/C:/dir` in a URI.
        let text = text
            .strip_prefix(r"\\?\")
            .unwrap_or(&text)
            .replace('\\', "/");
        if text.starts_with('/') {
            text.into_bytes()
        } else {
            format!("/{text}").into_bytes()
        }
    };
    let mut uri = String::from("file://");
    for byte in bytes {
        if byte.is_ascii_alphanumeric() || b"-._~/".contains(&byte) {
            uri.push(char::from(byte));
        } else {
            uri.push_str(&format!("%{byte:02X}"));
        }
    }
    uri
}

// -- sampling -----------------------------------------------------------------------------------

/// The answer to a sampling request: `reply`, or [`NO_MODEL`]; says so on stderr.
pub(crate) fn sample(
    reply: Option<&str>,
    params: &model::CreateMessageRequestParams,
) -> Result<model::CreateMessageResult, InputError> {
    let asked = format!(
        "mcx: the server asked for a sample ({} message{}, at most {} tokens)",
        params.messages.len(),
        if params.messages.len() == 1 { "" } else { "s" },
        params.max_tokens
    );
    let Some(reply) = reply else {
        crate::progress::eprint_line(&format!("{asked}; refused: {NO_MODEL}"));
        return Err(InputError::new(NO_MODEL));
    };
    crate::progress::eprint_line(&format!("{asked}; answered with --sampling-reply"));
    Ok(model::CreateMessageResult {
        meta: None,
        content: model::CreateMessageResultContent::TextContent(model::TextContent {
            meta: None,
            annotations: None,
            text: reply.to_owned(),
        }),
        model: MODEL.to_owned(),
        role: model::Role::Assistant,
        stop_reason: Some("endTurn".to_owned()),
        extra: JsonObject::new(),
    })
}

// -- elicitation --------------------------------------------------------------------------------

/// One question on the terminal at a time (a server may ask several at once).
static TERMINAL: Mutex<()> = Mutex::new(());

/// Asks the user on the terminal, or declines off one.
pub(crate) async fn elicit(request: Elicitation) -> Result<Elicited, InputError> {
    if let Some(why) = off_terminal(io::stdin().is_terminal(), io::stderr().is_terminal()) {
        let what = match &request {
            Elicitation::Url { message, url, .. } => format!("to open {url}: {message}"),
            Elicitation::Form { message, .. } => format!("for input: {message}"),
            _ => "for input".to_owned(),
        };
        crate::progress::eprint_line(&format!("mcx: the server asked {what}; declined ({why})"));
        return Ok(Elicited::decline());
    }
    // The reading blocks: on a thread of its own, which does not keep the program from ending
    // (Ctrl-C, a timeout) while it waits for a line.
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let _turn = TERMINAL.lock().unwrap_or_else(|e| e.into_inner());
        let _held = crate::progress::hold();
        let mut input = io::stdin().lock();
        let mut output = io::stderr();
        let answer = ask(&mut input, &mut output, &request);
        if tx.send(answer).is_err() {
            // The call ended meanwhile (cancelled by the server, timed out).
            let _ = writeln!(output, "mcx: the server no longer waits for this answer");
        }
    });
    rx.await
        .map_err(|_| InputError::new("the question on the terminal ended without an answer"))
}

/// Why a question cannot be asked, naming the stream (or both) that is not a terminal: the
/// answers are read from stdin and the questions written to stderr. `None` when both are one.
fn off_terminal(stdin: bool, stderr: bool) -> Option<&'static str> {
    match (stdin, stderr) {
        (true, true) => None,
        (false, true) => Some("stdin is not a terminal"),
        (true, false) => Some("stderr is not a terminal"),
        (false, false) => Some("neither stdin nor stderr is a terminal"),
    }
}

/// Asks `request` on `output`, reading the answers from `input`; an unreadable terminal
/// cancels.
fn ask(input: &mut dyn BufRead, output: &mut dyn Write, request: &Elicitation) -> Elicited {
    let mut terminal = Terminal { input, output };
    let asked = match request {
        Elicitation::Form { message, schema } => form(&mut terminal, message, schema),
        Elicitation::Url { message, url, .. } => consent(&mut terminal, message, url),
        _ => Ok(Some(Elicited::decline())),
    };
    match asked {
        Ok(Some(answer)) => answer,
        Ok(None) => {
            let _ = writeln!(terminal.output, "\nmcx: cancelled");
            Elicited::cancel()
        }
        Err(e) => {
            let _ = writeln!(terminal.output, "\nmcx: cannot ask on the terminal: {e}");
            Elicited::cancel()
        }
    }
}

/// Where the questions go and the answers come from.
struct Terminal<'a> {
    input: &'a mut dyn BufRead,
    output: &'a mut dyn Write,
}

impl Terminal<'_> {
    /// Prints `prompt` and reads one line, trimmed; `None` at the end of the input (Ctrl-D).
    fn line(&mut self, prompt: &str) -> io::Result<Option<String>> {
        write!(self.output, "{prompt}")?;
        self.output.flush()?;
        let mut line = String::new();
        if self.input.read_line(&mut line)? == 0 {
            return Ok(None);
        }
        Ok(Some(line.trim().to_owned()))
    }

    fn say(&mut self, text: &str) -> io::Result<()> {
        writeln!(self.output, "{text}")
    }
}

/// Asks for consent to a URL elicitation: `y` accepts, `n` or nothing declines, `cancel`
/// cancels. `None` at the end of the input.
fn consent(terminal: &mut Terminal<'_>, message: &str, url: &str) -> io::Result<Option<Elicited>> {
    terminal.say(&format!(
        "\nThe server asks you to open a URL: {}",
        escape(message)
    ))?;
    terminal.say(&format!("  {}", escape(url)))?;
    if let Some(host) = host(url) {
        terminal.say(&format!("  (host: {})", escape(host)))?;
    }
    terminal.say("  (mcx opens nothing: open it yourself if you agree)")?;
    loop {
        let Some(answer) = terminal.line("Open it? [y/N/cancel] ")? else {
            return Ok(None);
        };
        match answer.to_ascii_lowercase().as_str() {
            "y" | "yes" => return Ok(Some(Elicited::accepted())),
            "" | "n" | "no" => return Ok(Some(Elicited::decline())),
            "c" | "cancel" => return Ok(Some(Elicited::cancel())),
            _ => terminal.say("  answer y, n or cancel")?,
        }
    }
}

/// The host of `url` (`scheme://[user@]host[:port]/...`), shown apart so that a link that
/// looks like another site's is seen for what it is.
fn host(url: &str) -> Option<&str> {
    let (_, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    (!host.is_empty()).then_some(host)
}

/// Asks each field of `schema`, then whether to submit. `None` when the user cancelled with
/// Ctrl-D.
fn form(
    terminal: &mut Terminal<'_>,
    message: &str,
    schema: &JsonObject,
) -> io::Result<Option<Elicited>> {
    terminal.say(&format!("\nThe server asks: {}", escape(message)))?;
    terminal.say("  (Ctrl-D cancels)")?;
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let empty = JsonObject::new();
    let properties = schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let mut fields: Vec<(&String, &Value)> = properties.iter().collect();
    // Required fields first, each group by name (the object has lost the server's order).
    fields.sort_by_key(|(name, _)| !required.contains(&name.as_str()));
    let mut content = JsonObject::new();
    for (name, property) in fields {
        let field = Field::new(name, property, required.contains(&name.as_str()));
        match ask_field(terminal, &field)? {
            Asked::Value(value) => {
                content.insert(name.clone(), value);
            }
            Asked::Skipped => {}
            Asked::Cancelled => return Ok(None),
        }
    }
    loop {
        let Some(answer) = terminal.line("Submit? [Y/n/cancel] ")? else {
            return Ok(None);
        };
        match answer.to_ascii_lowercase().as_str() {
            "" | "y" | "yes" => return Ok(Some(Elicited::accept(content))),
            "n" | "no" => return Ok(Some(Elicited::decline())),
            "c" | "cancel" => return Ok(Some(Elicited::cancel())),
            _ => terminal.say("  answer y (submit), n (decline) or cancel")?,
        }
    }
}

/// The outcome of one field's question.
#[derive(Debug, PartialEq)]
enum Asked {
    Value(Value),
    Skipped,
    Cancelled,
}

/// Asks `field` until the answer is valid, empty (its default, or skipped when optional) or
/// Ctrl-D.
fn ask_field(terminal: &mut Terminal<'_>, field: &Field) -> io::Result<Asked> {
    terminal.say(&field.heading())?;
    if let Kind::Choice { choices } | Kind::Choices { choices, .. } = &field.kind {
        for (i, (value, label)) in choices.iter().enumerate() {
            let default = field.is_default(value);
            terminal.say(&format!(
                "    {}) {}{}",
                i + 1,
                escape(label),
                if default { " (default)" } else { "" }
            ))?;
        }
    }
    let prompt = format!("  {} > ", field.hint());
    loop {
        let Some(answer) = terminal.line(&prompt)? else {
            return Ok(Asked::Cancelled);
        };
        if answer.is_empty() {
            if let Some(default) = &field.default {
                return Ok(Asked::Value(default.clone()));
            }
            if !field.required {
                return Ok(Asked::Skipped);
            }
            terminal.say("  an answer is required")?;
            continue;
        }
        match field.kind.parse(&answer) {
            Ok(value) => return Ok(Asked::Value(value)),
            Err(why) => terminal.say(&format!("  {why}"))?,
        }
    }
}

/// One field of a form.
struct Field {
    name: String,
    title: Option<String>,
    description: Option<String>,
    required: bool,
    default: Option<Value>,
    kind: Kind,
}

/// What a field takes.
#[derive(Debug, PartialEq)]
enum Kind {
    /// A string, of a `format` (email, uri, date, date-time) and a length.
    Text {
        format: Option<String>,
        min_length: Option<u64>,
        max_length: Option<u64>,
    },
    /// A number (a whole one when `integer`) within bounds.
    Number {
        integer: bool,
        minimum: Option<f64>,
        maximum: Option<f64>,
    },
    /// Yes or no.
    Boolean,
    /// One of `choices` (value, label).
    Choice { choices: Vec<(String, String)> },
    /// Some of `choices` (an array of strings), between `min_items` and `max_items`.
    Choices {
        choices: Vec<(String, String)>,
        min_items: Option<u64>,
        max_items: Option<u64>,
    },
    /// Another type: the answer is read as JSON.
    Json(String),
}

/// The choices of an enum schema: `enum` (labelled by `enumNames` when given), or `oneOf` /
/// `anyOf` of `{const, title}`.
fn choices(schema: &Value) -> Option<Vec<(String, String)>> {
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        let names = schema.get("enumNames").and_then(Value::as_array);
        let choices = values
            .iter()
            .enumerate()
            .filter_map(|(i, value)| {
                let value = value.as_str()?.to_owned();
                let label = names
                    .and_then(|names| names.get(i))
                    .and_then(Value::as_str)
                    .map_or_else(|| value.clone(), |name| format!("{name} ({value})"));
                Some((value, label))
            })
            .collect();
        return Some(choices);
    }
    let options = schema
        .get("oneOf")
        .or_else(|| schema.get("anyOf"))
        .and_then(Value::as_array)?;
    Some(
        options
            .iter()
            .filter_map(|option| {
                let value = option.get("const")?.as_str()?.to_owned();
                let label = option
                    .get("title")
                    .and_then(Value::as_str)
                    .map_or_else(|| value.clone(), |title| format!("{title} ({value})"));
                Some((value, label))
            })
            .collect(),
    )
}

impl Field {
    fn new(name: &str, schema: &Value, required: bool) -> Field {
        let text = |key: &str| schema.get(key).and_then(Value::as_str).map(str::to_owned);
        let number = |key: &str| schema.get(key).and_then(Value::as_f64);
        let count = |key: &str| schema.get(key).and_then(Value::as_u64);
        let kind = match schema.get("type").and_then(Value::as_str) {
            Some("string") => match choices(schema) {
                Some(choices) => Kind::Choice { choices },
                None => Kind::Text {
                    format: text("format"),
                    min_length: count("minLength"),
                    max_length: count("maxLength"),
                },
            },
            Some(kind @ ("number" | "integer")) => Kind::Number {
                integer: kind == "integer",
                minimum: number("minimum"),
                maximum: number("maximum"),
            },
            Some("boolean") => Kind::Boolean,
            Some("array") => match schema.get("items").and_then(choices) {
                Some(choices) => Kind::Choices {
                    choices,
                    min_items: count("minItems"),
                    max_items: count("maxItems"),
                },
                None => Kind::Json("array".into()),
            },
            other => Kind::Json(other.unwrap_or("any").to_owned()),
        };
        Field {
            name: name.to_owned(),
            title: text("title"),
            description: text("description"),
            required,
            default: schema.get("default").cloned(),
            kind,
        }
    }

    /// `Title (name, required): description`, escaped.
    fn heading(&self) -> String {
        let required = if self.required { ", required" } else { "" };
        let mut heading = match &self.title {
            Some(title) => format!("{} ({}{required})", escape(title), escape(&self.name)),
            None if self.required => format!("{} (required)", escape(&self.name)),
            None => escape(&self.name).into_owned(),
        };
        if let Some(description) = &self.description {
            heading.push_str(": ");
            heading.push_str(&escape(description));
        }
        heading
    }

    fn is_default(&self, value: &str) -> bool {
        match &self.default {
            Some(Value::String(default)) => default == value,
            Some(Value::Array(defaults)) => defaults.iter().any(|d| d.as_str() == Some(value)),
            _ => false,
        }
    }

    /// What to type, and the default: `integer from 1 to 100 [42]`, `y/n`, ...
    fn hint(&self) -> String {
        let default = match (&self.kind, &self.default) {
            (Kind::Boolean, _) | (_, None) => String::new(),
            (_, Some(Value::String(s))) => format!(" [{}]", escape(s)),
            (_, Some(Value::Array(values))) => {
                let values: Vec<String> = values
                    .iter()
                    .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
                    .collect();
                format!(" [{}]", escape(&values.join(", ")))
            }
            (_, Some(other)) => format!(" [{}]", escape(&other.to_string())),
        };
        let hint = match &self.kind {
            Kind::Text { format, .. } => format
                .as_deref()
                .map_or_else(|| "text".to_owned(), |format| escape(format).into_owned()),
            Kind::Number {
                integer,
                minimum,
                maximum,
            } => {
                let what = if *integer { "integer" } else { "number" };
                match (minimum, maximum) {
                    (Some(min), Some(max)) => format!("{what} from {min} to {max}"),
                    (Some(min), None) => format!("{what} from {min}"),
                    (None, Some(max)) => format!("{what} up to {max}"),
                    (None, None) => what.to_owned(),
                }
            }
            Kind::Boolean => match self.default {
                Some(Value::Bool(true)) => "[Y/n]".to_owned(),
                Some(Value::Bool(false)) => "[y/N]".to_owned(),
                _ => "[y/n]".to_owned(),
            },
            Kind::Choice { choices } => format!("choice 1-{}", choices.len()),
            Kind::Choices { choices, .. } => {
                format!("choices 1-{}, separated by commas", choices.len())
            }
            Kind::Json(kind) => format!("{} as JSON", escape(kind)),
        };
        format!("{hint}{default}")
    }
}

impl Kind {
    /// The value of a non-empty answer, or what is wrong with it.
    fn parse(&self, answer: &str) -> Result<Value, String> {
        match self {
            Kind::Text {
                format,
                min_length,
                max_length,
            } => {
                let length = answer.chars().count() as u64;
                if let Some(min) = min_length.filter(|min| length < *min) {
                    return Err(format!("at least {min} characters"));
                }
                if let Some(max) = max_length.filter(|max| length > *max) {
                    return Err(format!("at most {max} characters"));
                }
                if let Some(format) = format.as_deref() {
                    check_format(format, answer)?;
                }
                Ok(Value::String(answer.to_owned()))
            }
            Kind::Number {
                integer,
                minimum,
                maximum,
            } => {
                let value: Value = if *integer {
                    answer
                        .parse::<i64>()
                        .map(Value::from)
                        .map_err(|_| "a whole number, such as 42".to_owned())?
                } else {
                    match answer.parse::<i64>() {
                        Ok(whole) => Value::from(whole),
                        Err(_) => answer
                            .parse::<f64>()
                            .ok()
                            .filter(|n| n.is_finite())
                            .map(Value::from)
                            .ok_or_else(|| "a number, such as 3.5".to_owned())?,
                    }
                };
                let number = value.as_f64().unwrap_or_default();
                if let Some(min) = minimum.filter(|min| number < *min) {
                    return Err(format!("at least {min}"));
                }
                if let Some(max) = maximum.filter(|max| number > *max) {
                    return Err(format!("at most {max}"));
                }
                Ok(value)
            }
            Kind::Boolean => match answer.to_ascii_lowercase().as_str() {
                "y" | "yes" | "true" => Ok(Value::Bool(true)),
                "n" | "no" | "false" => Ok(Value::Bool(false)),
                _ => Err("answer y or n".to_owned()),
            },
            Kind::Choice { choices } => pick(choices, answer).map(Value::from),
            Kind::Choices {
                choices,
                min_items,
                max_items,
            } => {
                let mut picked: Vec<Value> = Vec::new();
                for part in answer.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                    let value = Value::from(pick(choices, part)?);
                    if !picked.contains(&value) {
                        picked.push(value);
                    }
                }
                let count = picked.len() as u64;
                if let Some(min) = min_items.filter(|min| count < *min) {
                    return Err(format!("choose at least {min}"));
                }
                if let Some(max) = max_items.filter(|max| count > *max) {
                    return Err(format!("choose at most {max}"));
                }
                Ok(Value::Array(picked))
            }
            Kind::Json(_) => serde_json::from_str(answer).map_err(|e| format!("not JSON: {e}")),
        }
    }
}

/// The value of the choice `answer` names: its number, or its value.
fn pick(choices: &[(String, String)], answer: &str) -> Result<String, String> {
    if let Ok(n) = answer.parse::<usize>()
        && let Some((value, _)) = n.checked_sub(1).and_then(|i| choices.get(i))
    {
        return Ok(value.clone());
    }
    choices
        .iter()
        .find(|(value, _)| value.eq_ignore_ascii_case(answer))
        .map(|(value, _)| value.clone())
        .ok_or_else(|| {
            format!(
                "`{}`: give a number from 1 to {}",
                escape(answer),
                choices.len()
            )
        })
}

/// Checks `answer` against the string formats MCP forms may ask for.
fn check_format(format: &str, answer: &str) -> Result<(), String> {
    let ok = match format {
        "email" => is_email(answer),
        "uri" => is_uri(answer),
        "date" => is_date(answer),
        "date-time" => is_date_time(answer),
        // A format mcx does not know: taken as it is.
        _ => true,
    };
    if ok {
        Ok(())
    } else {
        let example = match format {
            "email" => "name@example.com",
            "uri" => "https://example.com/page",
            "date" => "2026-07-28",
            _ => "2026-07-28T09:30:00Z",
        };
        Err(format!("not a valid {format} (such as {example})"))
    }
}

/// `local@domain.tld`, without spaces.
fn is_email(text: &str) -> bool {
    let Some((local, domain)) = text.rsplit_once('@') else {
        return false;
    };
    !local.is_empty()
        && !text.chars().any(char::is_whitespace)
        && domain.contains('.')
        && !domain.starts_with('.')
        && !domain.ends_with('.')
}

/// `scheme:rest` (RFC 3986): a scheme of a letter then letters, digits, `+`, `-`, `.`; no
/// spaces.
fn is_uri(text: &str) -> bool {
    let Some((scheme, rest)) = text.split_once(':') else {
        return false;
    };
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        && !rest.is_empty()
        && !text.chars().any(char::is_whitespace)
}

/// `YYYY-MM-DD`, a day that exists.
fn is_date(text: &str) -> bool {
    let parts: Vec<&str> = text.split('-').collect();
    let [year, month, day] = parts[..] else {
        return false;
    };
    if year.len() != 4 || month.len() != 2 || day.len() != 2 {
        return false;
    }
    let (Ok(year), Ok(month), Ok(day)) = (
        year.parse::<u32>(),
        month.parse::<u32>(),
        day.parse::<u32>(),
    ) else {
        return false;
    };
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    (1..=days).contains(&day)
}

/// `YYYY-MM-DDThh:mm:ss[.fraction](Z|+hh:mm|-hh:mm)` (RFC 3339).
fn is_date_time(text: &str) -> bool {
    let Some((date, time)) = text.split_once(['T', 't']) else {
        return false;
    };
    let (clock, zone) = if let Some(clock) = time.strip_suffix(['Z', 'z']) {
        (clock, None)
    } else if let Some(at) = time.rfind(['+', '-']) {
        (&time[..at], Some(&time[at + 1..]))
    } else {
        return false;
    };
    let clock = clock.split_once('.').map_or(clock, |(whole, fraction)| {
        if !fraction.is_empty() && fraction.bytes().all(|b| b.is_ascii_digit()) {
            whole
        } else {
            ""
        }
    });
    let two = |text: &str, max: u32| text.len() == 2 && text.parse::<u32>().is_ok_and(|n| n <= max);
    let clock_ok = match clock.split(':').collect::<Vec<_>>()[..] {
        [h, m, s] => two(h, 23) && two(m, 59) && two(s, 60),
        _ => false,
    };
    let zone_ok = match zone.map(|z| z.split(':').collect::<Vec<_>>()) {
        None => true,
        Some(parts) => matches!(parts[..], [h, m] if two(h, 23) && two(m, 59)),
    };
    is_date(date) && clock_ok && zone_ok
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Asks `request` with `typed` as the user's input; the answer and the screen.
    fn asked(request: &Elicitation, typed: &str) -> (Elicited, String) {
        let mut input = typed.as_bytes();
        let mut screen = Vec::new();
        let answer = ask(&mut input, &mut screen, request);
        (answer, String::from_utf8(screen).unwrap())
    }

    fn form_of(schema: Value) -> Elicitation {
        Elicitation::Form {
            message: "Tell me".into(),
            schema: schema.as_object().cloned().unwrap(),
        }
    }

    fn object(value: Value) -> JsonObject {
        value.as_object().cloned().unwrap()
    }

    #[test]
    fn off_a_terminal_the_note_names_what_is_not_one() {
        assert_eq!(off_terminal(true, true), None);
        assert_eq!(off_terminal(false, true), Some("stdin is not a terminal"));
        assert_eq!(off_terminal(true, false), Some("stderr is not a terminal"));
        assert_eq!(
            off_terminal(false, false),
            Some("neither stdin nor stderr is a terminal")
        );
    }

    #[test]
    fn a_form_is_asked_field_by_field_required_first() {
        let request = form_of(json!({"type": "object", "properties": {
            "age": {"type": "integer", "title": "Age", "minimum": 0, "maximum": 150},
            "name": {"type": "string", "description": "Your name"},
            "subscribe": {"type": "boolean", "default": false},
        }, "required": ["name"]}));
        // A bad integer, one out of bounds, then a good one; the boolean's default; submitted.
        let (answer, screen) = asked(&request, "Ada\nold\n200\n36\n\n\n");
        assert_eq!(
            answer,
            Elicited::accept(object(
                json!({"name": "Ada", "age": 36, "subscribe": false})
            ))
        );
        let name = screen.find("name (required): Your name").expect(&screen);
        let age = screen.find("Age (age)").expect(&screen);
        assert!(name < age, "{screen}");
        assert!(screen.contains("integer from 0 to 150 > "), "{screen}");
        assert!(screen.contains("a whole number"), "{screen}");
        assert!(screen.contains("at most 150"), "{screen}");
        assert!(screen.contains("[y/N] > "), "{screen}");
        assert!(screen.contains("Submit? [Y/n/cancel]"), "{screen}");
    }

    #[test]
    fn required_fields_are_insisted_on_and_optional_ones_skipped() {
        let request = form_of(json!({"type": "object", "properties": {
            "name": {"type": "string"},
            "note": {"type": "string"},
        }, "required": ["name"]}));
        let (answer, screen) = asked(&request, "\nAda\n\ny\n");
        assert_eq!(answer, Elicited::accept(object(json!({"name": "Ada"}))));
        assert!(screen.contains("an answer is required"), "{screen}");
    }

    #[test]
    fn decline_cancel_and_ctrl_d() {
        let request = form_of(json!({"type": "object", "properties": {
            "ok": {"type": "boolean"}}, "required": ["ok"]}));
        assert_eq!(asked(&request, "y\nn\n").0, Elicited::decline());
        assert_eq!(asked(&request, "y\ncancel\n").0, Elicited::cancel());
        // The end of the input (Ctrl-D) at a field or at the submit question.
        assert_eq!(asked(&request, "").0, Elicited::cancel());
        let (answer, screen) = asked(&request, "maybe\ny\n");
        assert_eq!(answer, Elicited::cancel());
        assert!(screen.contains("answer y or n"), "{screen}");
        assert!(screen.contains("mcx: cancelled"), "{screen}");
    }

    #[test]
    fn choices_are_numbered_with_their_titles_and_defaults() {
        let request = form_of(json!({"type": "object", "properties": {
            "friend": {"type": "string", "enum": ["Monica", "Rachel"], "default": "Monica"},
            "hero": {"type": "string", "oneOf": [
                {"const": "hero-1", "title": "Superman"},
                {"const": "hero-2", "title": "Wonder Woman"}]},
            "pet": {"type": "string", "enum": ["pet-1", "pet-2"], "enumNames": ["Cats", "Dogs"]},
            "fish": {"type": "array", "minItems": 1, "maxItems": 2, "items": {"anyOf": [
                {"const": "fish-1", "title": "Tuna"},
                {"const": "fish-2", "title": "Salmon"},
                {"const": "fish-3", "title": "Trout"}]}},
        }}));
        // fish: none is too few, three too many, 9 no choice; then two, one repeated.
        let typed = ",\n1,2,3\n9\n3, 1,3\n\n2\npet-2\n\n";
        let (answer, screen) = asked(&request, typed);
        assert_eq!(
            answer,
            Elicited::accept(object(json!({
                "fish": ["fish-3", "fish-1"],
                "friend": "Monica",
                "hero": "hero-2",
                "pet": "pet-2",
            })))
        );
        assert!(screen.contains("1) Monica (default)"), "{screen}");
        assert!(screen.contains("2) Wonder Woman (hero-2)"), "{screen}");
        assert!(screen.contains("1) Cats (pet-1)"), "{screen}");
        assert!(screen.contains("choose at least 1"), "{screen}");
        assert!(screen.contains("choose at most 2"), "{screen}");
        assert!(
            screen.contains("`9`: give a number from 1 to 3"),
            "{screen}"
        );
        assert!(screen.contains("choice 1-2 [Monica] > "), "{screen}");
        assert!(screen.contains("separated by commas > "), "{screen}");
        let several =
            json!({"type": "array", "items": {"enum": ["a", "b"]}, "default": ["a", "b"]});
        assert_eq!(
            Field::new("f", &several, false).hint(),
            "choices 1-2, separated by commas [a, b]"
        );
    }

    #[test]
    fn strings_are_checked_against_their_format_and_length() {
        let text = |format: &str| Kind::Text {
            format: Some(format.into()),
            min_length: None,
            max_length: None,
        };
        assert!(text("email").parse("ada@example.com").is_ok());
        assert!(text("email").parse("ada").is_err());
        assert!(text("email").parse("a da@example.com").is_err());
        assert!(text("uri").parse("https://example.com").is_ok());
        assert!(text("uri").parse("example.com").is_err());
        assert!(text("date").parse("2024-02-29").is_ok());
        assert!(text("date").parse("2023-02-29").is_err());
        assert!(text("date").parse("2023-13-01").is_err());
        assert!(text("date-time").parse("2026-07-28T09:30:00Z").is_ok());
        assert!(
            text("date-time")
                .parse("2026-07-28T09:30:00.5+02:00")
                .is_ok()
        );
        assert!(text("date-time").parse("2026-07-28 09:30").is_err());
        assert!(text("color").parse("anything").is_ok());
        let short = Kind::Text {
            format: None,
            min_length: Some(2),
            max_length: Some(3),
        };
        assert_eq!(short.parse("a"), Err("at least 2 characters".into()));
        assert_eq!(short.parse("abcd"), Err("at most 3 characters".into()));
        assert_eq!(short.parse("abc"), Ok(json!("abc")));
    }

    #[test]
    fn numbers_keep_their_kind_and_bounds() {
        let number = Kind::Number {
            integer: false,
            minimum: Some(0.0),
            maximum: Some(1000.0),
        };
        assert_eq!(number.parse("2.5"), Ok(json!(2.5)));
        assert_eq!(number.parse("7"), Ok(json!(7)));
        assert_eq!(number.parse("-1"), Err("at least 0".into()));
        assert!(number.parse("NaN").is_err());
        let integer = Kind::Number {
            integer: true,
            minimum: None,
            maximum: None,
        };
        assert!(integer.parse("2.5").is_err());
        assert_eq!(
            Kind::Json("object".into()).parse(r#"{"a":1}"#),
            Ok(json!({"a": 1}))
        );
    }

    #[test]
    fn server_text_is_escaped_on_the_terminal() {
        let request = Elicitation::Form {
            message: "Hi\u{1b}[2J".into(),
            schema: object(json!({"type": "object", "properties": {
                "x": {"type": "string", "title": "T\u{1b}]0;owned\u{7}"}}})),
        };
        let (_, screen) = asked(&request, "\n\n");
        assert!(!screen.contains('\u{1b}'), "{screen:?}");
    }

    #[test]
    fn a_url_elicitation_shows_the_url_and_asks_consent() {
        let request = Elicitation::Url {
            message: "Sign in".into(),
            url: "https://example.com/login".into(),
            elicitation_id: Some("e1".into()),
        };
        let (answer, screen) = asked(&request, "y\n");
        assert_eq!(answer, Elicited::accepted());
        assert!(screen.contains("  https://example.com/login\n"), "{screen}");
        assert!(screen.contains("  (host: example.com)\n"), "{screen}");
        assert_eq!(
            host("https://bank.example@evil.test:8443/x?y"),
            Some("evil.test:8443")
        );
        assert_eq!(host("mailto:a@b.c"), None);
        assert_eq!(asked(&request, "\n").0, Elicited::decline());
        assert_eq!(asked(&request, "cancel\n").0, Elicited::cancel());
        assert_eq!(asked(&request, "").0, Elicited::cancel());
    }

    #[test]
    fn roots_are_canonical_file_uris_named_after_the_directory() {
        let dir = std::env::temp_dir().join(format!("mcx root {}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        // A path with `..` and a space: canonicalised, then percent-encoded.
        let found = roots(&[dir.join("sub").join("..")]).unwrap();
        let canonical = std::fs::canonicalize(&dir).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(
            found[0].name.as_deref(),
            canonical.file_name().and_then(|n| n.to_str())
        );
        let uri = &found[0].uri;
        assert!(uri.starts_with("file:///"), "{uri}");
        let end = format!("/mcx%20root%20{}", std::process::id());
        assert!(uri.ends_with(&end), "{uri}");
        assert!(!uri.contains(".."), "{uri}");
        let missing = roots(&[dir.join("missing")]).unwrap_err();
        assert!(missing.starts_with("--root "), "{missing}");
        std::fs::write(dir.join("file"), "").unwrap();
        let file = roots(&[dir.join("file")]).unwrap_err();
        assert!(file.ends_with("not a directory"), "{file}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn sampling_answers_with_the_reply_or_refuses() {
        let params: modelctx_types::v2025_11_25::CreateMessageRequestParams =
            serde_json::from_value(json!({"messages": [], "maxTokens": 10})).unwrap();
        let params: model::CreateMessageRequestParams = params.into();
        let answer = sample(Some("An old pond"), &params).unwrap();
        assert_eq!(answer.model, "mcx");
        assert_eq!(answer.stop_reason.as_deref(), Some("endTurn"));
        assert!(matches!(
            answer.content,
            model::CreateMessageResultContent::TextContent(ref t) if t.text == "An old pond"
        ));
        assert_eq!(sample(None, &params).unwrap_err().0, NO_MODEL);
    }
}
