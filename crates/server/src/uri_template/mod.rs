//! RFC 6570 URI templates, levels 1 to 4, for MCP resource templates.
//!
//! A resource template (`resources/templates/list`) carries a `uriTemplate`. The server
//! [parses](UriTemplate::parse) it when the template is registered, [matches](UriTemplate::matches)
//! the URI of each `resources/read` against the registered templates to find the handler and its
//! arguments. Expansion (`UriTemplate::expand`, RFC 6570 exactly) is compiled for the tests only,
//! where it is the oracle of the matching round trips.
//!
//! # Syntax
//!
//! Everything in RFC 6570 section 2: literals (with pct-encoded triplets, and non-ASCII characters
//! only from `ucschar` / `iprivate`), the operators `+ # . / ; ? &` (the reserved `= , ! @ |` are
//! rejected), variable lists `{x,y}`, variable names made of `ALPHA / DIGIT / "_" / pct-encoded`
//! with inner dots, and the modifiers prefix `:N` (1 to 9999, no leading zero) and explode `*` (not
//! both on one variable). A template is at most 4096 bytes with at most 64 expressions.
//!
//! # Expansion
//!
//! Exactly RFC 6570 section 3 and appendix A: per-operator first string, separator, named / `ifemp`
//! behaviour and allowed set (unreserved only, or unreserved + reserved + existing pct-encoded
//! triplets for `+` and `#`); everything else is pct-encoded as UTF-8 with upper-case hex. A
//! variable that is absent, an empty list or an empty map is undefined and expands to nothing. A
//! prefix counts characters, not bytes (and, for `+` and `#`, a pct-encoded triplet of the value
//! counts as one character); prefixes do not apply to lists and maps (RFC 6570 section 2.4.1), which
//! expand whole. Non-ASCII literal characters are pct-encoded.
//!
//! # Matching
//!
//! RFC 6570 leaves matching undefined (a template can usually produce one URI from several sets of
//! values). [`UriTemplate::matches`] uses this deterministic rule: the template is walked left to
//! right once, each part consuming a prefix of what is left of the URI, and nothing is ever undone.
//! The URI matches when every part succeeded and the whole URI was consumed.
//!
//! - A **literal** must appear exactly; a pct-encoded triplet of the template also matches with
//!   lower-case hex, and a non-ASCII character matches either raw or as its pct-encoded UTF-8.
//! - Each expression first determines where it must **stop**, from the part that follows it:
//!   before a literal, at the literal's first character; before an expression with operator `#`,
//!   `.`, `/`, `;`, `?` or `&`, at that character; before `{x}` or `{+x}` and at the end of the
//!   template, nowhere. Operator none, `+` and `#` refine the literal case: when the literal starts
//!   with an ASCII character other than a hex digit, they stop at the first *occurrence* of the
//!   literal's longest prefix of ASCII characters other than `%`, rather than at its first
//!   character. Where the first-character rule gives a match this gives the same one, and it also
//!   matches `{+path}/here` against `/foo/bar/here` (`path` = `/foo/bar`), which the
//!   first-character rule cannot.
//! - **Operator none** takes every character up to the stop that is not `/`, `?` or `#` (reserved
//!   characters that expansion would have encoded, such as `:` or `@`, included, so that URIs built
//!   by hand match); so `file:///{path}` does not match `file:///a/b` while `file:///{+path}` does. **`+`** takes every
//!   character up to the stop. **`#`** is undefined unless the URI continues with `#`; then it
//!   consumes it and takes every character up to the stop. For one variable, what was taken is its
//!   value (a string, even if empty). With several, `{x,y}`, the text is split on `,`: each
//!   variable gets one piece in order, the last one the rest (commas included), and variables
//!   left without a piece are undefined. An exploded variable (`{list*}`) takes all the remaining
//!   pieces as a list (undefined if nothing remains).
//! - **`/`** and **`.`**: each variable takes one `/segment` (`.label`) if the URI continues with
//!   `/` (`.`), else it and the following variables are undefined; a segment runs to the next
//!   `/`, `?`, `#` (and, for `.`, `.`) or the stop. An exploded variable takes every following
//!   segment, as a list. `db://tables{/table,column}` thus matches `db://tables`,
//!   `db://tables/users` and `db://tables/users/id`.
//! - **`;`**, **`?`** and **`&`** parse `name=value` parameters (`;a=1;b`, `?a=1&b=2`), the names in
//!   any order. Consecutive `;` expressions, and a `?` or `&` expression followed by `&` ones
//!   (`{?x}{&y}`), share their parameters. The parameters start at the operator's character
//!   (`?` or `&` for a query group) and run to the stop; `;` parameters also end at `/`, `?` and
//!   `#`, query parameters at `#`. A parameter named like a variable gives its value (the first
//!   one if repeated; an empty string for `;name` or `?name` without `=`); a variable without
//!   parameter is undefined; parameters of other names are ignored, except that the first exploded
//!   variable without parameters of its own name collects them as a map (`{?keys*}` on `?a=1&b=2`
//!   gives `keys = {a: 1, b: 2}`). An exploded variable with parameters of its own name gives
//!   their values as a list (`{?list*}` on `?list=a&list=b`).
//! - A **prefix** `:N` caps what a variable takes at N characters (pct-decoded characters, and so
//!   the rest is left to the following parts) where the variable's end is found by scanning; where
//!   it is delimited (a piece of `{x:3,y}`, a parameter value), a longer value is no match.
//! - **Values** are pct-decoded. A `%` not followed by two hex digits, or a decoded value that is
//!   not UTF-8, is no match. Exploded variables give [`VarValue::List`], or [`VarValue::Map`] as
//!   above; nothing else gives a map, since a non-exploded variable is a plain string
//!   (`{list}` on `red,green,blue` is the string `red,green,blue`).
//! - A variable appearing in several expressions must get equal values from each where defined.
//!
//! Being greedy and non-backtracking, matching does not find a split that would need to give back
//! characters: `{/list*}/end` never matches (the list takes `/end` too), nor does `{a}{b}` split
//! `xy` other than as `a = xy`, `b = ""`.
//!
//! ## Linear time
//!
//! Matching is one pass without backtracking, so a hostile URI costs O(len(uri) + len(template))
//! per template. Every loop over the URI advances the position by at least one byte per iteration
//! and never moves it back; what an expression took is then split and pct-decoded once; the search
//! for a following literal (the standard library's two-way string search, linear in the text plus
//! the pattern) covers what the expression takes plus the literal's length and happens once per
//! expression. Each URI byte is thus examined a bounded number of times. The matcher counts its
//! work (bytes visited by each pass), and the tests check that count on 100 KB hostile URIs.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, HashMap, HashSet};
#[cfg(test)]
use std::fmt::Write as _;

/// The longest template accepted, in bytes.
const MAX_TEMPLATE_LEN: usize = 4096;
/// The most expressions a template may have.
const MAX_EXPRESSIONS: usize = 64;
/// The largest prefix modifier.
const MAX_PREFIX: usize = 9999;

/// A parsed RFC 6570 URI template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UriTemplate {
    /// The template as given.
    source: String,
    /// Literals and expressions, in order; never two literals in a row, never an empty literal.
    parts: Vec<Part>,
}

/// An error in a URI template.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid URI template at byte {at}: {reason}")]
pub(crate) struct TemplateError {
    /// The byte offset in the template where the error was found.
    pub(crate) at: usize,
    /// What is wrong.
    pub(crate) reason: &'static str,
}

/// A variable's value for expansion, and what matching extracts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum VarValue {
    /// A string (possibly empty, which is defined).
    String(String),
    /// A list of strings; undefined when empty.
    List(Vec<String>),
    /// Name / value pairs, in order; undefined when empty.
    Map(Vec<(String, String)>),
}

/// A literal or an expression of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    /// Literal text, as written in the template (valid: pct-encoded triplets are complete).
    Literal(String),
    /// An expression `{...}`.
    Expr(Expr),
}

/// An expression: an operator and its variables.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Expr {
    /// The operator.
    op: Op,
    /// The variables, at least one.
    vars: Vec<VarSpec>,
}

/// A variable of an expression.
#[derive(Debug, Clone, PartialEq, Eq)]
struct VarSpec {
    /// The variable name, as written (pct-encoded triplets included).
    name: String,
    /// Its modifier.
    modifier: Modifier,
}

/// A variable's modifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Modifier {
    /// None.
    None,
    /// `:N`, 1 to 9999 characters.
    Prefix(usize),
    /// `*`.
    Explode,
}

/// An expression operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    /// No operator: simple string expansion.
    Simple,
    /// `+`: reserved expansion.
    Reserved,
    /// `#`: fragment expansion.
    Fragment,
    /// `.`: label expansion.
    Label,
    /// `/`: path segments.
    Path,
    /// `;`: path-style parameters.
    Param,
    /// `?`: form-style query.
    Query,
    /// `&`: form-style query continuation.
    QueryCont,
}

impl Op {
    /// The string put before the first defined variable (RFC 6570 appendix A).
    fn first(self) -> &'static str {
        match self {
            Self::Simple | Self::Reserved => "",
            Self::Fragment => "#",
            Self::Label => ".",
            Self::Path => "/",
            Self::Param => ";",
            Self::Query => "?",
            Self::QueryCont => "&",
        }
    }

    /// The separator between defined variables (and exploded items).
    #[cfg(test)] // expansion: the oracle of the matching tests, not used by the server
    fn sep(self) -> &'static str {
        match self {
            Self::Simple | Self::Reserved | Self::Fragment => ",",
            Self::Label => ".",
            Self::Path => "/",
            Self::Param => ";",
            Self::Query | Self::QueryCont => "&",
        }
    }

    /// Whether values are written `name=value`.
    #[cfg(test)] // expansion: the oracle of the matching tests, not used by the server
    fn named(self) -> bool {
        matches!(self, Self::Param | Self::Query | Self::QueryCont)
    }

    /// What follows a name whose value is empty.
    #[cfg(test)] // expansion: the oracle of the matching tests, not used by the server
    fn ifemp(self) -> &'static str {
        match self {
            Self::Query | Self::QueryCont => "=",
            _ => "",
        }
    }

    /// Whether reserved characters and pct-encoded triplets pass through unencoded.
    #[cfg(test)] // expansion: the oracle of the matching tests, not used by the server
    fn allow_reserved(self) -> bool {
        matches!(self, Self::Reserved | Self::Fragment)
    }
}

impl UriTemplate {
    /// Parses and validates a template: at most 4096 bytes and 64 expressions.
    pub(crate) fn parse(template: &str) -> Result<Self, TemplateError> {
        if template.len() > MAX_TEMPLATE_LEN {
            return Err(error(MAX_TEMPLATE_LEN, "template longer than 4096 bytes"));
        }
        let bytes = template.as_bytes();
        let mut parts = Vec::new();
        let mut literal_start = 0;
        let mut expressions = 0;
        let mut i = 0;
        while let Some(&c) = bytes.get(i) {
            match c {
                b'{' => {
                    if literal_start < i {
                        parts.push(Part::Literal(slice(template, literal_start, i).to_owned()));
                    }
                    expressions += 1;
                    if expressions > MAX_EXPRESSIONS {
                        return Err(error(i, "more than 64 expressions"));
                    }
                    let (expr, next) = parse_expression(template, i)?;
                    parts.push(Part::Expr(expr));
                    i = next;
                    literal_start = i;
                }
                b'}' => return Err(error(i, "'}' outside an expression")),
                b'%' => {
                    if hex_at(bytes, i).is_none() {
                        return Err(error(i, "'%' not followed by two hex digits"));
                    }
                    i += 3;
                }
                0..=0x7F => {
                    if !is_literal_ascii(c) {
                        return Err(error(i, "character not allowed in a literal"));
                    }
                    i += 1;
                }
                _ => {
                    let Some(ch) = template.get(i..).and_then(|rest| rest.chars().next()) else {
                        return Err(error(i, "character not allowed in a literal"));
                    };
                    if !is_literal_non_ascii(ch) {
                        return Err(error(i, "character not allowed in a literal"));
                    }
                    i += ch.len_utf8();
                }
            }
        }
        if literal_start < bytes.len() {
            parts.push(Part::Literal(
                slice(template, literal_start, bytes.len()).to_owned(),
            ));
        }
        Ok(Self {
            source: template.to_owned(),
            parts,
        })
    }

    /// The template as given to [`parse`](Self::parse).
    pub(crate) fn as_str(&self) -> &str {
        &self.source
    }

    /// The variable names, in order of first appearance.
    pub(crate) fn variables(&self) -> Vec<&str> {
        let mut seen = HashSet::new();
        self.expressions()
            .flat_map(|expr| &expr.vars)
            .map(|var| var.name.as_str())
            .filter(|name| seen.insert(*name))
            .collect()
    }

    /// Expands the template with `values` (RFC 6570 section 3); absent variables are undefined.
    #[cfg(test)] // expansion: the oracle of the matching tests, not used by the server
    pub(crate) fn expand(&self, values: &HashMap<String, VarValue>) -> String {
        let mut out = String::with_capacity(self.source.len());
        for part in &self.parts {
            match part {
                Part::Literal(literal) => {
                    for ch in literal.chars() {
                        if ch.is_ascii() {
                            out.push(ch);
                        } else {
                            push_pct_encoded(&mut out, ch.encode_utf8(&mut [0; 4]).as_bytes());
                        }
                    }
                }
                Part::Expr(expr) => expand_expression(&mut out, expr, values),
            }
        }
        out
    }

    /// Matches a URI; on success the value of each variable that appeared (undefined ones are
    /// absent). See the module documentation for the rules.
    pub(crate) fn matches(&self, uri: &str) -> Option<BTreeMap<String, VarValue>> {
        self.match_counting_work(uri).0
    }

    /// [`matches`](Self::matches), also returning the work done: the number of URI bytes visited
    /// over all passes, which stays within a small multiple of the URI and template lengths.
    fn match_counting_work(&self, uri: &str) -> (Option<BTreeMap<String, VarValue>>, usize) {
        let mut matcher = Matcher {
            uri,
            bytes: uri.as_bytes(),
            pos: 0,
            work: 0,
            out: BTreeMap::new(),
        };
        let matched = matcher.run(&self.parts).is_some() && matcher.pos == uri.len();
        (matched.then_some(matcher.out), matcher.work)
    }

    /// The expressions, in order.
    fn expressions(&self) -> impl Iterator<Item = &Expr> {
        self.parts.iter().filter_map(|part| match part {
            Part::Expr(expr) => Some(expr),
            Part::Literal(_) => None,
        })
    }
}

/// A [`TemplateError`].
fn error(at: usize, reason: &'static str) -> TemplateError {
    TemplateError { at, reason }
}

/// `s[start..end]`, or `""` if that is not a slice of `s` (it always is where this is used).
fn slice(s: &str, start: usize, end: usize) -> &str {
    s.get(start..end).unwrap_or_default()
}

/// Parses the expression starting with the `{` at `open`; returns it and the offset after `}`.
fn parse_expression(template: &str, open: usize) -> Result<(Expr, usize), TemplateError> {
    let bytes = template.as_bytes();
    let unclosed = || error(open, "unclosed expression");
    let mut i = open + 1;
    let op = match bytes.get(i) {
        None => return Err(unclosed()),
        Some(b'}') => return Err(error(i, "empty expression")),
        Some(b'=' | b',' | b'!' | b'@' | b'|') => {
            return Err(error(i, "reserved operator"));
        }
        Some(b'+') => Op::Reserved,
        Some(b'#') => Op::Fragment,
        Some(b'.') => Op::Label,
        Some(b'/') => Op::Path,
        Some(b';') => Op::Param,
        Some(b'?') => Op::Query,
        Some(b'&') => Op::QueryCont,
        Some(_) => Op::Simple,
    };
    if op != Op::Simple {
        i += 1;
    }
    let mut vars = Vec::new();
    loop {
        let start = i;
        while let Some(&c) = bytes.get(i) {
            if c.is_ascii_alphanumeric() || c == b'_' {
                i += 1;
            } else if c == b'%' {
                if hex_at(bytes, i).is_none() {
                    return Err(error(i, "'%' not followed by two hex digits"));
                }
                i += 3;
            } else if c == b'.' {
                if i == start || bytes.get(i - 1) == Some(&b'.') {
                    return Err(error(i, "misplaced '.' in a variable name"));
                }
                i += 1;
            } else {
                break;
            }
        }
        if i == start {
            return Err(match bytes.get(i) {
                None => unclosed(),
                Some(_) => error(i, "expected a variable name"),
            });
        }
        if bytes.get(i - 1) == Some(&b'.') {
            return Err(error(i - 1, "variable name ending with '.'"));
        }
        let name = slice(template, start, i).to_owned();
        let modifier = match bytes.get(i) {
            Some(b':') => {
                i += 1;
                let digits = i;
                while bytes.get(i).is_some_and(u8::is_ascii_digit) {
                    i += 1;
                }
                if i == digits {
                    return Err(error(i, "expected a prefix length"));
                }
                let length: usize = slice(template, digits, i).parse().unwrap_or(usize::MAX);
                if bytes.get(digits) == Some(&b'0') || i - digits > 4 || length > MAX_PREFIX {
                    return Err(error(digits, "prefix length not from 1 to 9999"));
                }
                if bytes.get(i) == Some(&b'*') {
                    return Err(error(i, "prefix and explode on one variable"));
                }
                Modifier::Prefix(length)
            }
            Some(b'*') => {
                i += 1;
                Modifier::Explode
            }
            _ => Modifier::None,
        };
        vars.push(VarSpec { name, modifier });
        match bytes.get(i) {
            Some(b',') => i += 1,
            Some(b'}') => return Ok((Expr { op, vars }, i + 1)),
            None => return Err(unclosed()),
            Some(_) => return Err(error(i, "unexpected character in an expression")),
        }
    }
}

/// ASCII characters allowed in a literal (RFC 6570 section 2.1), `%` and braces excepted.
fn is_literal_ascii(c: u8) -> bool {
    matches!(c,
        0x21 | 0x23 | 0x24 | 0x26 | 0x28..=0x3B | 0x3D | 0x3F..=0x5B | 0x5D | 0x5F | 0x61..=0x7A | 0x7E)
}

/// Non-ASCII characters allowed in a literal: `ucschar` and `iprivate` (RFC 3987).
fn is_literal_non_ascii(ch: char) -> bool {
    let c = u32::from(ch);
    matches!(c, 0xA0..=0xD7FF | 0xE000..=0xFDCF | 0xFDF0..=0xFFEF)
        || (c >= 0x1_0000 && (c & 0xFFFF) <= 0xFFFD)
}

/// RFC 3986 `unreserved`.
#[cfg(test)] // expansion: the oracle of the matching tests, not used by the server
fn is_unreserved(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~')
}

/// RFC 3986 `reserved`: `gen-delims` and `sub-delims`.
#[cfg(test)] // expansion: the oracle of the matching tests, not used by the server
fn is_reserved(c: u8) -> bool {
    matches!(
        c,
        b':' | b'/'
            | b'?'
            | b'#'
            | b'['
            | b']'
            | b'@'
            | b'!'
            | b'$'
            | b'&'
            | b'\''
            | b'('
            | b')'
            | b'*'
            | b'+'
            | b','
            | b';'
            | b'='
    )
}

/// The value of a hex digit.
fn hex_value(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// The octet of the pct-encoded triplet at `i`, if `bytes[i..]` starts with one.
fn hex_at(bytes: &[u8], i: usize) -> Option<u8> {
    if bytes.get(i) != Some(&b'%') {
        return None;
    }
    let high = hex_value(*bytes.get(i + 1)?)?;
    let low = hex_value(*bytes.get(i + 2)?)?;
    Some(high << 4 | low)
}

/// Appends each octet as a pct-encoded triplet with upper-case hex.
#[cfg(test)] // expansion: the oracle of the matching tests, not used by the server
fn push_pct_encoded(out: &mut String, octets: &[u8]) {
    for octet in octets {
        let _ = write!(out, "%{octet:02X}");
    }
}

/// Appends `value` with the characters outside the operator's allowed set pct-encoded.
#[cfg(test)] // expansion: the oracle of the matching tests, not used by the server
fn push_encoded(out: &mut String, value: &str, allow_reserved: bool) {
    let bytes = value.as_bytes();
    let mut i = 0;
    while let Some(&c) = bytes.get(i) {
        if is_unreserved(c) || (allow_reserved && is_reserved(c)) {
            out.push(char::from(c));
            i += 1;
        } else if allow_reserved && hex_at(bytes, i).is_some() {
            out.push_str(slice(value, i, i + 3));
            i += 3;
        } else {
            // Non-ASCII characters are encoded octet by octet: their UTF-8.
            push_pct_encoded(out, &[c]);
            i += 1;
        }
    }
}

/// The first `length` characters of `value`; with `allow_reserved`, a pct-encoded triplet counts as
/// one character (it is copied as is, and must not be cut).
#[cfg(test)] // expansion: the oracle of the matching tests, not used by the server
fn prefix(value: &str, length: usize, allow_reserved: bool) -> &str {
    let bytes = value.as_bytes();
    let mut skip = 0;
    let mut count = 0;
    for (i, _) in value.char_indices() {
        if skip > 0 {
            skip -= 1;
            continue;
        }
        if count == length {
            return slice(value, 0, i);
        }
        count += 1;
        if allow_reserved && hex_at(bytes, i).is_some() {
            skip = 2;
        }
    }
    value
}

/// Appends the expansion of one expression (RFC 6570 appendix A).
#[cfg(test)] // expansion: the oracle of the matching tests, not used by the server
fn expand_expression(out: &mut String, expr: &Expr, values: &HashMap<String, VarValue>) {
    let op = expr.op;
    let allow = op.allow_reserved();
    let mut first = true;
    for var in &expr.vars {
        let Some(value) = values.get(&var.name) else {
            continue;
        };
        let defined = match value {
            VarValue::String(_) => true,
            VarValue::List(items) => !items.is_empty(),
            VarValue::Map(pairs) => !pairs.is_empty(),
        };
        if !defined {
            continue;
        }
        out.push_str(if first { op.first() } else { op.sep() });
        first = false;
        let explode = var.modifier == Modifier::Explode;
        match value {
            VarValue::String(s) => {
                let s = match var.modifier {
                    Modifier::Prefix(length) => prefix(s, length, allow),
                    _ => s,
                };
                if op.named() {
                    out.push_str(&var.name);
                    if s.is_empty() {
                        out.push_str(op.ifemp());
                        continue;
                    }
                    out.push('=');
                }
                push_encoded(out, s, allow);
            }
            VarValue::List(items) if explode => {
                for (k, item) in items.iter().enumerate() {
                    if k > 0 {
                        out.push_str(op.sep());
                    }
                    if op.named() {
                        out.push_str(&var.name);
                        if item.is_empty() {
                            out.push_str(op.ifemp());
                            continue;
                        }
                        out.push('=');
                    }
                    push_encoded(out, item, allow);
                }
            }
            VarValue::Map(pairs) if explode => {
                for (k, (name, item)) in pairs.iter().enumerate() {
                    if k > 0 {
                        out.push_str(op.sep());
                    }
                    push_encoded(out, name, allow);
                    if op.named() && item.is_empty() {
                        out.push_str(op.ifemp());
                        continue;
                    }
                    out.push('=');
                    push_encoded(out, item, allow);
                }
            }
            VarValue::List(items) => {
                if op.named() {
                    out.push_str(&var.name);
                    // The value is empty only as a single empty item (no list is undefined).
                    let empty = matches!(items.as_slice(), [only] if only.is_empty());
                    out.push_str(if empty { op.ifemp() } else { "=" });
                }
                for (k, item) in items.iter().enumerate() {
                    if k > 0 {
                        out.push(',');
                    }
                    push_encoded(out, item, allow);
                }
            }
            VarValue::Map(pairs) => {
                if op.named() {
                    // `name,value` is never empty.
                    out.push_str(&var.name);
                    out.push('=');
                }
                for (k, (name, item)) in pairs.iter().enumerate() {
                    if k > 0 {
                        out.push(',');
                    }
                    push_encoded(out, name, allow);
                    out.push(',');
                    push_encoded(out, item, allow);
                }
            }
        }
    }
}

/// Where an expression must stop when matching, from the part that follows it.
#[derive(Debug, Clone, Copy)]
enum Stop<'t> {
    /// Nowhere before the characters the expression accepts run out.
    None,
    /// At this ASCII character.
    Byte(u8),
    /// For operator none, `+` and `#`: at the first occurrence of this text (ASCII, at least one
    /// character, not starting with a hex digit, without `%`); for the others at its first
    /// character.
    Anchor(&'t str),
    /// At this pct-encoded octet (case-insensitive hex).
    Triplet(u8),
    /// At this non-ASCII character (its UTF-8), raw or pct-encoded.
    Char(&'t str),
}

impl<'t> Stop<'t> {
    /// The stop before `next`, the part following an expression.
    fn before(next: Option<&'t Part>) -> Self {
        match next {
            None => Self::None,
            Some(Part::Expr(expr)) => match expr.op.first().as_bytes().first() {
                Some(&c) => Self::Byte(c),
                None => Self::None,
            },
            Some(Part::Literal(literal)) => {
                let bytes = literal.as_bytes();
                let Some(&c) = bytes.first() else {
                    return Self::None;
                };
                if c == b'%' {
                    return hex_at(bytes, 0).map_or(Self::None, Self::Triplet);
                }
                if !c.is_ascii() {
                    let len = literal.chars().next().map_or(0, char::len_utf8);
                    return Self::Char(slice(literal, 0, len));
                }
                if c.is_ascii_hexdigit() {
                    return Self::Byte(c);
                }
                let len = bytes
                    .iter()
                    .take_while(|&&b| b.is_ascii() && b != b'%')
                    .count();
                Self::Anchor(slice(literal, 0, len))
            }
        }
    }

    /// Whether `bytes[pos..]` starts with the stop (an anchor: with its first character). Looks at
    /// no more than 12 bytes.
    fn at(self, bytes: &[u8], pos: usize) -> bool {
        match self {
            Self::None => false,
            Self::Byte(c) => bytes.get(pos) == Some(&c),
            Self::Anchor(anchor) => bytes.get(pos) == anchor.as_bytes().first(),
            Self::Triplet(octet) => hex_at(bytes, pos) == Some(octet),
            Self::Char(raw) => char_at(bytes, pos, raw.as_bytes()).is_some(),
        }
    }
}

/// If `bytes[pos..]` starts with the character whose UTF-8 is `raw`, raw or pct-encoded, the
/// offset after it.
fn char_at(bytes: &[u8], pos: usize, raw: &[u8]) -> Option<usize> {
    if bytes.get(pos..pos + raw.len()) == Some(raw) {
        return Some(pos + raw.len());
    }
    let mut p = pos;
    for &octet in raw {
        if hex_at(bytes, p) != Some(octet) {
            return None;
        }
        p += 3;
    }
    Some(p)
}

/// Characters operator none takes.
fn accept_simple(c: u8) -> bool {
    !matches!(c, b'/' | b'?' | b'#')
}

/// Characters `+` and `#` take.
fn accept_any(_: u8) -> bool {
    true
}

/// Characters of a `.label`.
fn accept_label(c: u8) -> bool {
    !matches!(c, b'.' | b'/' | b'?' | b'#')
}

/// Characters of a `/segment` and of `;` parameters.
fn accept_segment(c: u8) -> bool {
    !matches!(c, b'/' | b'?' | b'#')
}

/// Characters of query parameters.
fn accept_query(c: u8) -> bool {
    c != b'#'
}

/// The state of one match of a URI against a template.
struct Matcher<'u> {
    /// The URI.
    uri: &'u str,
    /// Its bytes.
    bytes: &'u [u8],
    /// The offset up to which the URI has been matched; only ever increases.
    pos: usize,
    /// The bytes visited so far, over all passes.
    work: usize,
    /// The variables found so far.
    out: BTreeMap<String, VarValue>,
}

impl<'u> Matcher<'u> {
    /// Matches `parts` from `pos`, left to right; `None` if a part fails.
    fn run(&mut self, parts: &[Part]) -> Option<()> {
        let mut i = 0;
        while let Some(part) = parts.get(i) {
            match part {
                Part::Literal(literal) => {
                    self.literal(literal)?;
                    i += 1;
                }
                Part::Expr(expr) => {
                    // Named-parameter expressions that share their parameters.
                    let mut group = vec![expr];
                    let mut last = expr.op;
                    while let Some(Part::Expr(next)) = parts.get(i + group.len())
                        && matches!(
                            (last, next.op),
                            (Op::Param, Op::Param) | (Op::Query | Op::QueryCont, Op::QueryCont)
                        )
                    {
                        group.push(next);
                        last = next.op;
                    }
                    let end = i + group.len();
                    let stop = Stop::before(parts.get(end));
                    match expr.op {
                        Op::Simple | Op::Reserved | Op::Fragment => self.string(expr, stop)?,
                        Op::Label | Op::Path => self.segments(expr, stop)?,
                        Op::Param | Op::Query | Op::QueryCont => self.parameters(&group, stop)?,
                    }
                    i = end;
                }
            }
        }
        Some(())
    }

    /// The next byte.
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    /// Matches a literal; each template character looks at no more than 12 URI bytes.
    fn literal(&mut self, literal: &str) -> Option<()> {
        let mut chars = literal.chars();
        while let Some(ch) = chars.next() {
            self.work += 1;
            if ch == '%' {
                // A triplet (the template is valid): the same octet, hex in either case.
                let high = hex_value(u8::try_from(chars.next()?).ok()?)?;
                let low = hex_value(u8::try_from(chars.next()?).ok()?)?;
                if hex_at(self.bytes, self.pos)? != (high << 4 | low) {
                    return None;
                }
                self.pos += 3;
            } else {
                let mut raw = [0; 4];
                self.pos = char_at(self.bytes, self.pos, ch.encode_utf8(&mut raw).as_bytes())?;
            }
        }
        Some(())
    }

    /// Advances over the bytes `accept` takes, up to `stop` and at most `cap` characters; returns
    /// the start. One iteration per character (a pct-encoded triplet of a character's octet counts
    /// in it), each looking at no more than 12 bytes.
    fn scan(&mut self, accept: fn(u8) -> bool, stop: Stop<'_>, cap: Option<usize>) -> usize {
        let start = self.pos;
        let mut chars = 0;
        while let Some(c) = self.peek() {
            self.work += 1;
            if !accept(c) || stop.at(self.bytes, self.pos) {
                break;
            }
            let (width, octet) = match hex_at(self.bytes, self.pos) {
                Some(octet) => (3, octet),
                None => (1, c),
            };
            // UTF-8 continuation octets do not start a character.
            if octet & 0xC0 != 0x80 {
                if cap == Some(chars) {
                    break;
                }
                chars += 1;
            }
            self.pos += width;
        }
        start
    }

    /// Advances like [`scan`](Self::scan), but stops at the first occurrence of an anchor.
    fn scan_value(&mut self, accept: fn(u8) -> bool, stop: Stop<'_>, cap: Option<usize>) -> usize {
        let Stop::Anchor(anchor) = stop else {
            return self.scan(accept, stop, cap);
        };
        let start = self.scan(accept, Stop::None, cap);
        let end = self.pos;
        // The occurrence must start at or before `end`: search `start..end + anchor.len()` (to a
        // character boundary) once. The anchor does not start with a hex digit, so it never
        // starts inside a pct-encoded triplet.
        let mut window_end = (end + anchor.len()).min(self.bytes.len());
        while !self.uri.is_char_boundary(window_end) {
            window_end += 1;
        }
        self.work += window_end - start;
        if let Some(found) = self.uri.get(start..window_end).and_then(|w| w.find(anchor))
            && start + found <= end
        {
            self.pos = start + found;
        }
        start
    }

    /// Operator none, `+` and `#`.
    fn string(&mut self, expr: &Expr, stop: Stop<'_>) -> Option<()> {
        if expr.op == Op::Fragment {
            if self.peek() != Some(b'#') {
                return Some(());
            }
            self.pos += 1;
        }
        let cap = match expr.vars.as_slice() {
            [
                VarSpec {
                    modifier: Modifier::Prefix(length),
                    ..
                },
            ] => Some(*length),
            _ => None,
        };
        let accept = if expr.op == Op::Simple {
            accept_simple
        } else {
            accept_any
        };
        let start = self.scan_value(accept, stop, cap);
        let taken = self.bytes.get(start..self.pos)?;
        let mut rest = Some(taken);
        for (k, var) in expr.vars.iter().enumerate() {
            let Some(text) = rest else {
                break;
            };
            if var.modifier == Modifier::Explode {
                rest = None;
                if !text.is_empty() {
                    let items = self.split_decode(text, b',')?;
                    self.insert(&var.name, VarValue::List(items))?;
                }
                continue;
            }
            let piece = if k + 1 == expr.vars.len() {
                rest = None;
                text
            } else {
                self.work += 1;
                match text.iter().position(|&c| c == b',') {
                    Some(comma) => {
                        self.work += comma;
                        rest = text.get(comma + 1..);
                        text.get(..comma)?
                    }
                    None => {
                        self.work += text.len();
                        rest = None;
                        text
                    }
                }
            };
            let value = self.decode_capped(piece, var.modifier)?;
            self.insert(&var.name, VarValue::String(value))?;
        }
        Some(())
    }

    /// `/` and `.`.
    fn segments(&mut self, expr: &Expr, stop: Stop<'_>) -> Option<()> {
        let (sep, accept): (u8, fn(u8) -> bool) = if expr.op == Op::Label {
            (b'.', accept_label)
        } else {
            (b'/', accept_segment)
        };
        for var in &expr.vars {
            if self.peek() != Some(sep) {
                break;
            }
            match var.modifier {
                Modifier::Explode => {
                    let mut items = Vec::new();
                    while self.peek() == Some(sep) {
                        self.pos += 1;
                        let start = self.scan(accept, stop, None);
                        items.push(self.decode(self.bytes.get(start..self.pos)?)?);
                    }
                    self.insert(&var.name, VarValue::List(items))?;
                }
                Modifier::Prefix(length) => {
                    self.pos += 1;
                    let start = self.scan(accept, stop, Some(length));
                    let value = self.decode(self.bytes.get(start..self.pos)?)?;
                    self.insert(&var.name, VarValue::String(value))?;
                }
                Modifier::None => {
                    self.pos += 1;
                    let start = self.scan(accept, stop, None);
                    let value = self.decode(self.bytes.get(start..self.pos)?)?;
                    self.insert(&var.name, VarValue::String(value))?;
                }
            }
        }
        Some(())
    }

    /// `;`, `?` and `&`: a group of expressions sharing their `name=value` parameters.
    fn parameters(&mut self, group: &[&Expr], stop: Stop<'_>) -> Option<()> {
        let Some(first) = group.first() else {
            return Some(());
        };
        let (sep, accept): (u8, fn(u8) -> bool) = if first.op == Op::Param {
            (b';', accept_segment)
        } else {
            (b'&', accept_query)
        };
        let starts = self
            .peek()
            .is_some_and(|c| group.iter().any(|e| e.op.first().as_bytes() == [c]));
        if !starts {
            return Some(());
        }
        self.pos += 1;
        let start = self.scan(accept, stop, None);
        let region = self.bytes.get(start..self.pos)?;

        // The group's variables, by name (first appearance wins).
        let mut slots: Vec<&VarSpec> = Vec::new();
        let mut slot_of: HashMap<&[u8], usize> = HashMap::new();
        for var in group.iter().flat_map(|e| &e.vars) {
            slot_of.entry(var.name.as_bytes()).or_insert_with(|| {
                slots.push(var);
                slots.len() - 1
            });
        }
        let mut single: Vec<Option<&[u8]>> = vec![None; slots.len()];
        let mut multiple: Vec<Vec<&[u8]>> = vec![Vec::new(); slots.len()];
        let mut others: Vec<(&[u8], &[u8])> = Vec::new();
        // One pass over the region to split it, one over each name to split and hash it.
        self.work += 2 * region.len();
        for param in region.split(|&c| c == sep) {
            self.work += 1;
            if param.is_empty() {
                continue;
            }
            let (name, value) = match param.iter().position(|&c| c == b'=') {
                Some(eq) => (param.get(..eq)?, param.get(eq + 1..)?),
                None => (param, &[][..]),
            };
            match slot_of.get(name) {
                Some(&k) => {
                    if slots.get(k)?.modifier == Modifier::Explode {
                        multiple.get_mut(k)?.push(value);
                    } else if single.get(k)?.is_none() {
                        *single.get_mut(k)? = Some(value);
                    }
                }
                None => others.push((name, value)),
            }
        }
        let mut others = Some(others).filter(|others| !others.is_empty());
        for (k, var) in slots.iter().enumerate() {
            if var.modifier == Modifier::Explode {
                let values = multiple.get(k)?;
                if !values.is_empty() {
                    let items = values
                        .iter()
                        .map(|value| self.decode(value))
                        .collect::<Option<Vec<_>>>()?;
                    self.insert(&var.name, VarValue::List(items))?;
                } else if let Some(pairs) = others.take() {
                    let pairs = pairs
                        .iter()
                        .map(|(name, value)| Some((self.decode(name)?, self.decode(value)?)))
                        .collect::<Option<Vec<_>>>()?;
                    self.insert(&var.name, VarValue::Map(pairs))?;
                }
            } else if let Some(value) = *single.get(k)? {
                let value = self.decode_capped(value, var.modifier)?;
                self.insert(&var.name, VarValue::String(value))?;
            }
        }
        Some(())
    }

    /// Pct-decodes; `None` for a `%` not followed by two hex digits or a result that is not UTF-8.
    fn decode(&mut self, text: &[u8]) -> Option<String> {
        self.work += text.len();
        let mut octets = Vec::with_capacity(text.len());
        let mut i = 0;
        while let Some(&c) = text.get(i) {
            if c == b'%' {
                octets.push(hex_at(text, i)?);
                i += 3;
            } else {
                octets.push(c);
                i += 1;
            }
        }
        String::from_utf8(octets).ok()
    }

    /// [`decode`](Self::decode), then `None` if longer than a prefix modifier allows.
    fn decode_capped(&mut self, text: &[u8], modifier: Modifier) -> Option<String> {
        let value = self.decode(text)?;
        if let Modifier::Prefix(length) = modifier {
            self.work += value.len();
            if value.chars().count() > length {
                return None;
            }
        }
        Some(value)
    }

    /// Splits on `sep` and decodes each piece.
    fn split_decode(&mut self, text: &[u8], sep: u8) -> Option<Vec<String>> {
        self.work += text.len();
        text.split(|&c| c == sep)
            .map(|piece| self.decode(piece))
            .collect()
    }

    /// Records a variable; `None` if it already has a different value.
    fn insert(&mut self, name: &str, value: VarValue) -> Option<()> {
        match self.out.entry(name.to_owned()) {
            Entry::Vacant(entry) => {
                entry.insert(value);
                Some(())
            }
            Entry::Occupied(entry) => {
                // Comparing looks at no more than what was just decoded.
                self.work += match &value {
                    VarValue::String(text) => text.len(),
                    VarValue::List(items) => items.iter().map(|item| item.len() + 1).sum(),
                    VarValue::Map(pairs) => pairs.iter().map(|(n, v)| n.len() + v.len() + 1).sum(),
                };
                (*entry.get() == value).then_some(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(value: &str) -> VarValue {
        VarValue::String(value.to_owned())
    }

    fn list(items: &[&str]) -> VarValue {
        VarValue::List(items.iter().map(|item| (*item).to_owned()).collect())
    }

    fn map(pairs: &[(&str, &str)]) -> VarValue {
        VarValue::Map(
            pairs
                .iter()
                .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
                .collect(),
        )
    }

    fn values(pairs: &[(&str, VarValue)]) -> HashMap<String, VarValue> {
        pairs
            .iter()
            .map(|(name, value)| ((*name).to_owned(), value.clone()))
            .collect()
    }

    fn found(pairs: &[(&str, VarValue)]) -> BTreeMap<String, VarValue> {
        pairs
            .iter()
            .map(|(name, value)| ((*name).to_owned(), value.clone()))
            .collect()
    }

    fn template(text: &str) -> UriTemplate {
        UriTemplate::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    /// The variables of RFC 6570 section 3.2 (`undef` is absent).
    fn rfc_values() -> HashMap<String, VarValue> {
        values(&[
            ("count", list(&["one", "two", "three"])),
            ("dom", list(&["example", "com"])),
            ("dub", s("me/too")),
            ("hello", s("Hello World!")),
            ("half", s("50%")),
            ("var", s("value")),
            ("who", s("fred")),
            ("base", s("http://example.com/home/")),
            ("path", s("/foo/bar")),
            ("list", list(&["red", "green", "blue"])),
            ("keys", map(&[("semi", ";"), ("dot", "."), ("comma", ",")])),
            ("v", s("6")),
            ("x", s("1024")),
            ("y", s("768")),
            ("empty", s("")),
            ("empty_keys", map(&[])),
        ])
    }

    fn check_expansions(cases: &[(&str, &str)]) {
        let vars = rfc_values();
        for (text, expected) in cases {
            assert_eq!(template(text).expand(&vars), *expected, "expanding {text}");
        }
    }

    #[test]
    fn rfc_3_2_1_variable_expansion() {
        check_expansions(&[
            ("{count}", "one,two,three"),
            ("{count*}", "one,two,three"),
            ("{/count}", "/one,two,three"),
            ("{/count*}", "/one/two/three"),
            ("{;count}", ";count=one,two,three"),
            ("{;count*}", ";count=one;count=two;count=three"),
            ("{?count}", "?count=one,two,three"),
            ("{?count*}", "?count=one&count=two&count=three"),
            ("{&count*}", "&count=one&count=two&count=three"),
        ]);
    }

    #[test]
    fn rfc_3_2_2_simple_string_expansion() {
        check_expansions(&[
            ("{var}", "value"),
            ("{hello}", "Hello%20World%21"),
            ("{half}", "50%25"),
            ("O{empty}X", "OX"),
            ("O{undef}X", "OX"),
            ("{x,y}", "1024,768"),
            ("{x,hello,y}", "1024,Hello%20World%21,768"),
            ("?{x,empty}", "?1024,"),
            ("?{x,undef}", "?1024"),
            ("?{undef,y}", "?768"),
            ("{var:3}", "val"),
            ("{var:30}", "value"),
            ("{list}", "red,green,blue"),
            ("{list*}", "red,green,blue"),
            ("{keys}", "semi,%3B,dot,.,comma,%2C"),
            ("{keys*}", "semi=%3B,dot=.,comma=%2C"),
        ]);
    }

    #[test]
    fn rfc_3_2_3_reserved_expansion() {
        check_expansions(&[
            ("{+var}", "value"),
            ("{+hello}", "Hello%20World!"),
            ("{+half}", "50%25"),
            ("{base}index", "http%3A%2F%2Fexample.com%2Fhome%2Findex"),
            ("{+base}index", "http://example.com/home/index"),
            ("O{+empty}X", "OX"),
            ("O{+undef}X", "OX"),
            ("{+path}/here", "/foo/bar/here"),
            ("here?ref={+path}", "here?ref=/foo/bar"),
            ("up{+path}{var}/here", "up/foo/barvalue/here"),
            ("{+x,hello,y}", "1024,Hello%20World!,768"),
            ("{+path,x}/here", "/foo/bar,1024/here"),
            ("{+path:6}/here", "/foo/b/here"),
            ("{+list}", "red,green,blue"),
            ("{+list*}", "red,green,blue"),
            ("{+keys}", "semi,;,dot,.,comma,,"),
            ("{+keys*}", "semi=;,dot=.,comma=,"),
        ]);
    }

    #[test]
    fn rfc_3_2_4_fragment_expansion() {
        check_expansions(&[
            ("{#var}", "#value"),
            ("{#hello}", "#Hello%20World!"),
            ("{#half}", "#50%25"),
            ("foo{#empty}", "foo#"),
            ("foo{#undef}", "foo"),
            ("{#x,hello,y}", "#1024,Hello%20World!,768"),
            ("{#path,x}/here", "#/foo/bar,1024/here"),
            ("{#path:6}/here", "#/foo/b/here"),
            ("{#list}", "#red,green,blue"),
            ("{#list*}", "#red,green,blue"),
            ("{#keys}", "#semi,;,dot,.,comma,,"),
            ("{#keys*}", "#semi=;,dot=.,comma=,"),
        ]);
    }

    #[test]
    fn rfc_3_2_5_label_expansion() {
        check_expansions(&[
            ("{.who}", ".fred"),
            ("{.who,who}", ".fred.fred"),
            ("{.half,who}", ".50%25.fred"),
            ("www{.dom*}", "www.example.com"),
            ("X{.var}", "X.value"),
            ("X{.empty}", "X."),
            ("X{.undef}", "X"),
            ("X{.var:3}", "X.val"),
            ("X{.list}", "X.red,green,blue"),
            ("X{.list*}", "X.red.green.blue"),
            ("X{.keys}", "X.semi,%3B,dot,.,comma,%2C"),
            ("X{.keys*}", "X.semi=%3B.dot=..comma=%2C"),
            ("X{.empty_keys}", "X"),
            ("X{.empty_keys*}", "X"),
        ]);
    }

    #[test]
    fn rfc_3_2_6_path_segment_expansion() {
        check_expansions(&[
            ("{/who}", "/fred"),
            ("{/who,who}", "/fred/fred"),
            ("{/half,who}", "/50%25/fred"),
            ("{/who,dub}", "/fred/me%2Ftoo"),
            ("{/var}", "/value"),
            ("{/var,empty}", "/value/"),
            ("{/var,undef}", "/value"),
            ("{/var,x}/here", "/value/1024/here"),
            ("{/var:1,var}", "/v/value"),
            ("{/list}", "/red,green,blue"),
            ("{/list*}", "/red/green/blue"),
            ("{/list*,path:4}", "/red/green/blue/%2Ffoo"),
            ("{/keys}", "/semi,%3B,dot,.,comma,%2C"),
            ("{/keys*}", "/semi=%3B/dot=./comma=%2C"),
        ]);
    }

    #[test]
    fn rfc_3_2_7_path_style_parameter_expansion() {
        check_expansions(&[
            ("{;who}", ";who=fred"),
            ("{;half}", ";half=50%25"),
            ("{;empty}", ";empty"),
            ("{;v,empty,who}", ";v=6;empty;who=fred"),
            ("{;v,bar,who}", ";v=6;who=fred"),
            ("{;x,y}", ";x=1024;y=768"),
            ("{;x,y,empty}", ";x=1024;y=768;empty"),
            ("{;x,y,undef}", ";x=1024;y=768"),
            ("{;hello:5}", ";hello=Hello"),
            ("{;list}", ";list=red,green,blue"),
            ("{;list*}", ";list=red;list=green;list=blue"),
            ("{;keys}", ";keys=semi,%3B,dot,.,comma,%2C"),
            ("{;keys*}", ";semi=%3B;dot=.;comma=%2C"),
        ]);
    }

    #[test]
    fn rfc_3_2_8_form_style_query_expansion() {
        check_expansions(&[
            ("{?who}", "?who=fred"),
            ("{?half}", "?half=50%25"),
            ("{?x,y}", "?x=1024&y=768"),
            ("{?x,y,empty}", "?x=1024&y=768&empty="),
            ("{?x,y,undef}", "?x=1024&y=768"),
            ("{?var:3}", "?var=val"),
            ("{?list}", "?list=red,green,blue"),
            ("{?list*}", "?list=red&list=green&list=blue"),
            ("{?keys}", "?keys=semi,%3B,dot,.,comma,%2C"),
            ("{?keys*}", "?semi=%3B&dot=.&comma=%2C"),
        ]);
    }

    #[test]
    fn rfc_3_2_9_form_style_query_continuation() {
        check_expansions(&[
            ("{&who}", "&who=fred"),
            ("{&half}", "&half=50%25"),
            ("?fixed=yes{&x}", "?fixed=yes&x=1024"),
            ("{&x,y,empty}", "&x=1024&y=768&empty="),
            ("{&x,y,undef}", "&x=1024&y=768"),
            ("{&var:3}", "&var=val"),
            ("{&list}", "&list=red,green,blue"),
            ("{&list*}", "&list=red&list=green&list=blue"),
            ("{&keys}", "&keys=semi,%3B,dot,.,comma,%2C"),
            ("{&keys*}", "&semi=%3B&dot=.&comma=%2C"),
        ]);
    }

    #[test]
    fn expansion_details() {
        let vars = values(&[
            ("accents", s("éèê!")),
            ("triplet", s("%41BC")),
            ("one_empty", list(&[""])),
            ("empty_item", map(&[("a", ""), ("b", "2")])),
            ("emoji", s("a😀b")),
        ]);
        let cases = [
            // Prefixes count characters, and pct-encoding is of the UTF-8.
            ("{accents:2}", "%C3%A9%C3%A8"),
            ("{emoji:2}", "a%F0%9F%98%80"),
            // With `+` and `#`, existing triplets pass through and count as one character.
            ("{+triplet}", "%41BC"),
            ("{+triplet:2}", "%41B"),
            ("{triplet}", "%2541BC"),
            ("{triplet:2}", "%254"),
            // Non-ASCII literals are pct-encoded; literal triplets are copied.
            ("é/%2F{undef}", "%C3%A9/%2F"),
            // ifemp for named lists and exploded maps.
            ("{?one_empty}", "?one_empty="),
            ("{;one_empty}", ";one_empty"),
            ("{?empty_item*}", "?a=&b=2"),
            ("{;empty_item*}", ";a;b=2"),
            ("{empty_item*}", "a=,b=2"),
            // Prefixes do not apply to composite values.
            ("{one_empty:1}", ""),
            ("{empty_item:1}", "a,,b,2"),
        ];
        for (text, expected) in cases {
            assert_eq!(template(text).expand(&vars), expected, "expanding {text}");
        }
    }

    #[test]
    fn accessors() {
        let t = template("file:///{+path}{?x,path}{&y*}{#x}");
        assert_eq!(t.as_str(), "file:///{+path}{?x,path}{&y*}{#x}");
        assert_eq!(t.variables(), ["path", "x", "y"]);
        assert_eq!(template("plain").variables(), Vec::<&str>::new());
        assert_eq!(template("").expand(&HashMap::new()), "");
        assert_eq!(
            template("{a%41.b_1}").variables(),
            ["a%41.b_1"],
            "pct-encoded and dotted names"
        );
    }

    #[test]
    fn malformed_templates() {
        let cases: &[(&str, usize, &str)] = &[
            ("file:///{path", 8, "unclosed expression"),
            ("{", 0, "unclosed expression"),
            ("{+", 0, "unclosed expression"),
            ("{x,", 0, "unclosed expression"),
            ("a{}", 2, "empty expression"),
            ("{=x}", 1, "reserved operator"),
            ("{!x}", 1, "reserved operator"),
            ("{,x}", 1, "reserved operator"),
            ("{@x}", 1, "reserved operator"),
            ("{|x}", 1, "reserved operator"),
            ("{$x}", 1, "expected a variable name"),
            ("{+}", 2, "expected a variable name"),
            ("{x,}", 3, "expected a variable name"),
            ("{a-b}", 2, "unexpected character in an expression"),
            ("{a b}", 2, "unexpected character in an expression"),
            ("{x{y}}", 2, "unexpected character in an expression"),
            ("{?x, y}", 4, "expected a variable name"),
            ("{??x}", 2, "expected a variable name"),
            ("{.x}{x.}", 6, "variable name ending with '.'"),
            ("{.x}", usize::MAX, ""),
            ("{..x}", 2, "misplaced '.' in a variable name"),
            ("{a..b}", 3, "misplaced '.' in a variable name"),
            ("{a%4}", 2, "'%' not followed by two hex digits"),
            ("{x:0}", 3, "prefix length not from 1 to 9999"),
            ("{x:01}", 3, "prefix length not from 1 to 9999"),
            ("{x:10000}", 3, "prefix length not from 1 to 9999"),
            (
                "{x:99999999999999999999999}",
                3,
                "prefix length not from 1 to 9999",
            ),
            ("{x:}", 3, "expected a prefix length"),
            ("{x:a}", 3, "expected a prefix length"),
            ("{x:3*}", 4, "prefix and explode on one variable"),
            ("{x*:3}", 3, "unexpected character in an expression"),
            ("{x**}", 3, "unexpected character in an expression"),
            ("a}b", 1, "'}' outside an expression"),
            ("a b", 1, "character not allowed in a literal"),
            ("a<b", 1, "character not allowed in a literal"),
            ("a\"", 1, "character not allowed in a literal"),
            ("a|b", 1, "character not allowed in a literal"),
            ("a\u{7f}", 1, "character not allowed in a literal"),
            ("a\u{85}", 1, "character not allowed in a literal"),
            ("a\u{FFFE}", 1, "character not allowed in a literal"),
            ("100%", 3, "'%' not followed by two hex digits"),
            ("%zz", 0, "'%' not followed by two hex digits"),
        ];
        for &(text, at, reason) in cases {
            let result = UriTemplate::parse(text);
            if at == usize::MAX {
                assert!(result.is_ok(), "{text}: {result:?}");
            } else {
                assert_eq!(result, Err(TemplateError { at, reason }), "parsing {text}");
            }
        }
        // Limits.
        let long = format!("a{}", "b".repeat(MAX_TEMPLATE_LEN));
        assert_eq!(
            UriTemplate::parse(&long),
            Err(TemplateError {
                at: MAX_TEMPLATE_LEN,
                reason: "template longer than 4096 bytes"
            })
        );
        assert!(UriTemplate::parse(&"b".repeat(MAX_TEMPLATE_LEN)).is_ok());
        assert!(UriTemplate::parse(&"{x}".repeat(64)).is_ok());
        assert_eq!(
            UriTemplate::parse(&"{x}".repeat(65)),
            Err(TemplateError {
                at: 192,
                reason: "more than 64 expressions"
            })
        );
        assert!(UriTemplate::parse("{x:9999}{x:1}").is_ok());
        assert!(UriTemplate::parse("日本/\u{E000}/%2f").is_ok());
        assert_eq!(
            UriTemplate::parse("{x:0}").unwrap_err().to_string(),
            "invalid URI template at byte 3: prefix length not from 1 to 9999"
        );
    }

    /// Expands, matches the result, and expects the same values back.
    fn round_trip(text: &str, pairs: &[(&str, VarValue)]) -> String {
        let t = template(text);
        let uri = t.expand(&values(pairs));
        assert_eq!(t.matches(&uri), Some(found(pairs)), "{text} on {uri}");
        uri
    }

    #[test]
    fn mcp_round_trips() {
        assert_eq!(
            round_trip("file:///{path}", &[("path", s("readme.md"))]),
            "file:///readme.md"
        );
        assert_eq!(
            round_trip("file:///{path}", &[("path", s("a/b c,d?#é"))]),
            "file:///a%2Fb%20c%2Cd%3F%23%C3%A9"
        );
        round_trip("file:///{path}", &[("path", s(""))]);
        assert_eq!(
            round_trip("file:///{+path}", &[("path", s("src/lib.rs"))]),
            "file:///src/lib.rs"
        );
        round_trip("file:///{+path}", &[("path", s("a b/ü/?x=1#y"))]);
        assert_eq!(
            round_trip(
                "repo://{owner}/{repo}/issues/{number}",
                &[
                    ("owner", s("modelctx")),
                    ("repo", s("model ctx")),
                    ("number", s("42"))
                ]
            ),
            "repo://modelctx/model%20ctx/issues/42"
        );
        assert_eq!(
            round_trip(
                "search://{?q,lang}",
                &[("q", s("rust & c++")), ("lang", s("en"))]
            ),
            "search://?q=rust%20%26%20c%2B%2B&lang=en"
        );
        round_trip("search://{?q,lang}", &[("lang", s("fr"))]);
        round_trip("search://{?q,lang}", &[("q", s(""))]);
        round_trip("search://{?q,lang}", &[]);
        round_trip("db://tables{/table,column}", &[]);
        round_trip("db://tables{/table,column}", &[("table", s("users"))]);
        assert_eq!(
            round_trip(
                "db://tables{/table,column}",
                &[("table", s("users")), ("column", s("e/mail"))]
            ),
            "db://tables/users/e%2Fmail"
        );
        round_trip("weather://{city}{?units}", &[("city", s("São Paulo"))]);
        assert_eq!(
            round_trip(
                "weather://{city}{?units}",
                &[("city", s("Paris")), ("units", s("metric"))]
            ),
            "weather://Paris?units=metric"
        );
        // The other operators and modifiers.
        round_trip("{+base}index", &[("base", s("http://example.com/home/"))]);
        round_trip("{+path}/here", &[("path", s("/foo/bar"))]);
        round_trip("{+path:6}/here", &[("path", s("/foo/b"))]);
        round_trip("here?ref={+path}", &[("path", s("/foo/bar"))]);
        round_trip(
            "{x,hello,y}",
            &[
                ("x", s("1024")),
                ("hello", s("Hello, World!")),
                ("y", s("768")),
            ],
        );
        round_trip("{#x,y}", &[("x", s("1")), ("y", s("a#b"))]);
        round_trip("foo{#frag}", &[("frag", s(""))]);
        round_trip("foo{#frag}", &[]);
        round_trip("{list*}", &[("list", list(&["red", "gr,een", "blue"]))]);
        round_trip("www{.dom*}", &[("dom", list(&["example", "com"]))]);
        round_trip("X{.var:3}", &[("var", s("val"))]);
        round_trip("X{.who,who}", &[("who", s("fred"))]);
        round_trip("{/list*}", &[("list", list(&["red", "", "blue"]))]);
        round_trip("{/var:1,var}", &[("var", s("v"))]);
        round_trip("{/a,b}.json", &[("a", s("x")), ("b", s("users"))]);
        round_trip(
            "{;x,y,empty}",
            &[("x", s("1024")), ("y", s("768")), ("empty", s(""))],
        );
        round_trip("{;list*}", &[("list", list(&["red", "green", "blue"]))]);
        round_trip("{;hello:5}", &[("hello", s("Hello"))]);
        round_trip(
            "{?keys*}",
            &[("keys", map(&[("semi", ";"), ("dot", "."), ("comma", ",")]))],
        );
        round_trip(
            "{;keys*}",
            &[("keys", map(&[("semi", ";"), ("empty", "")]))],
        );
        round_trip("{?list*}", &[("list", list(&["a", "b=c"]))]);
        round_trip("{?x}{&y}", &[("x", s("1")), ("y", s("2"))]);
        round_trip("{?x}{&y}", &[("y", s("2"))]);
        round_trip("?fixed=yes{&x}", &[("x", s("1024"))]);
        round_trip("{?var:3}", &[("var", s("val"))]);
        round_trip("a{x}b{x}c", &[("x", s("same"))]);
        round_trip("{x:2}{y}", &[("x", s("éè")), ("y", s("rest"))]);
        round_trip("é/{x}", &[("x", s("ü"))]);
        round_trip("{x}%2F{y}", &[("x", s("a")), ("y", s("b"))]);
    }

    fn matched(text: &str, uri: &str) -> Option<BTreeMap<String, VarValue>> {
        template(text).matches(uri)
    }

    #[test]
    fn matching_rules() {
        // `/` inside a simple variable, but not with `+`.
        assert_eq!(matched("file:///{path}", "file:///a/b"), None);
        assert_eq!(
            matched("file:///{+path}", "file:///a/b"),
            Some(found(&[("path", s("a/b"))]))
        );
        assert_eq!(matched("file:///{path}", "file:///a?b"), None);
        assert_eq!(matched("file:///{path}", "file:///a#b"), None);
        // Wrong literal, extra or missing characters.
        assert_eq!(matched("repo://{owner}/{repo}", "repox://a/b"), None);
        assert_eq!(matched("repo://{owner}/{repo}", "repo://a/b/c"), None);
        assert_eq!(matched("repo://{owner}/{repo}", "repo://a"), None);
        assert_eq!(matched("repo://{owner}/{repo}/x", "repo://a/b/xy"), None);
        assert_eq!(matched("weather://{city}{?units}", "weather://x#y"), None);
        assert_eq!(
            matched("db://tables{/table,column}", "db://tables/a/b/c"),
            None
        );
        // Bad triplets and bad UTF-8.
        assert_eq!(matched("file:///{path}", "file:///a%2"), None);
        assert_eq!(matched("file:///{path}", "file:///a%zz"), None);
        assert_eq!(matched("file:///{path}", "file:///%C3"), None);
        assert_eq!(matched("file:///{+path}", "file:///%FF"), None);
        assert_eq!(matched("{?q}", "?q=%C3%28"), None);
        // Raw (lenient) characters that expansion would have encoded.
        assert_eq!(
            matched("x:{a}", "x:b c:d"),
            Some(found(&[("a", s("b c:d"))]))
        );
        // Literal triplets match in either case; non-ASCII literals raw or encoded.
        assert_eq!(
            matched("{x}%2F{y}", "a%2fb"),
            Some(found(&[("x", s("a")), ("y", s("b"))]))
        );
        assert_eq!(matched("é{x}", "%C3%A9z"), Some(found(&[("x", s("z"))])));
        assert_eq!(matched("é{x}", "éz"), Some(found(&[("x", s("z"))])));
        assert_eq!(matched("{x}é", "aé"), Some(found(&[("x", s("a"))])));
        assert_eq!(matched("{x}é", "a%c3%a9"), Some(found(&[("x", s("a"))])));
        // A following literal: the first occurrence, not the first character.
        assert_eq!(
            matched("{+path}/here", "/foo/bar/here"),
            Some(found(&[("path", s("/foo/bar"))]))
        );
        assert_eq!(
            matched("{+a}-{b}", "x-y-z"),
            Some(found(&[("a", s("x")), ("b", s("y-z"))]))
        );
        assert_eq!(
            matched("{x}.json", "a.b.json"),
            Some(found(&[("x", s("a.b"))]))
        );
        assert_eq!(matched("{x}.json", "a/.json"), None);
        // `/` and `.` stop at the literal's first character.
        assert_eq!(
            matched("{/a}.json", "/users.json"),
            Some(found(&[("a", s("users"))]))
        );
        assert_eq!(matched("{/a}.json", "/my.file.json"), None);
        // A literal starting with a hex digit: first-character rule, triplets kept whole.
        assert_eq!(matched("{x}41", "%4141"), Some(found(&[("x", s("A"))])));
        // Several variables split on commas; the last keeps the rest.
        assert_eq!(
            matched("{x,y}", "1,2,3"),
            Some(found(&[("x", s("1")), ("y", s("2,3"))]))
        );
        assert_eq!(matched("{x,y}", "1"), Some(found(&[("x", s("1"))])));
        assert_eq!(matched("{x,y}", ""), Some(found(&[("x", s(""))])));
        assert_eq!(
            matched("{x,list*}", "1,2,3"),
            Some(found(&[("x", s("1")), ("list", list(&["2", "3"]))]))
        );
        assert_eq!(matched("{list*}", ""), Some(found(&[])));
        assert_eq!(matched("{list}", "a,b"), Some(found(&[("list", s("a,b"))])));
        // Prefixes: scanned values stop, delimited ones must fit.
        assert_eq!(
            matched("{x:3}{y}", "abcdef"),
            Some(found(&[("x", s("abc")), ("y", s("def"))]))
        );
        assert_eq!(matched("{x:3}", "abcd"), None);
        assert_eq!(matched("{x:3,y}", "abcd,e"), None);
        assert_eq!(matched("{?x:3}", "?x=abcd"), None);
        assert_eq!(
            matched("{x:1}{y}", "%C3%A9%C3%A8"),
            Some(found(&[("x", s("é")), ("y", s("è"))]))
        );
        assert_eq!(matched("{/x:2}c", "/abc"), Some(found(&[("x", s("ab"))])));
        // Query parameters: any order, unknown ones ignored, repeated ones: the first.
        assert_eq!(
            matched("search://{?q,lang}", "search://?lang=en&page=2&q=a%20b&q=c"),
            Some(found(&[("q", s("a b")), ("lang", s("en"))]))
        );
        assert_eq!(
            matched("search://{?q,lang}", "search://?q&&lang="),
            Some(found(&[("q", s("")), ("lang", s(""))]))
        );
        assert_eq!(
            matched("{?x}{&y}", "?y=2&x=1"),
            Some(found(&[("x", s("1")), ("y", s("2"))]))
        );
        assert_eq!(
            matched("{?x}{&rest*}", "?a=1&x=0&b"),
            Some(found(&[
                ("x", s("0")),
                ("rest", map(&[("a", "1"), ("b", "")]))
            ]))
        );
        assert_eq!(
            matched("{?list*,keys*}", "?list=1&a=b&list=2"),
            Some(found(&[
                ("list", list(&["1", "2"])),
                ("keys", map(&[("a", "b")]))
            ]))
        );
        assert_eq!(matched("{?q}", "?q=/a?b"), Some(found(&[("q", s("/a?b"))])));
        assert_eq!(matched("{?q}", "q=1"), None);
        assert_eq!(
            matched("{?q}#top", "?q=1#top"),
            Some(found(&[("q", s("1"))]))
        );
        assert_eq!(
            matched("{;a}{;b}", ";b=2;a=1"),
            Some(found(&[("a", s("1")), ("b", s("2"))]))
        );
        assert_eq!(matched("{;a}/x", ";a=1;z/x"), Some(found(&[("a", s("1"))])));
        // A variable in several places must agree.
        assert_eq!(matched("{x}/{x}", "a/a"), Some(found(&[("x", s("a"))])));
        assert_eq!(matched("{x}/{x}", "a/b"), None);
        // Greedy, without backtracking.
        assert_eq!(matched("{/list*}/end", "/a/b/end"), None);
        assert_eq!(
            matched("{a}{b}", "xy"),
            Some(found(&[("a", s("xy")), ("b", s(""))]))
        );
        assert_eq!(
            matched("X{.list*}", "X.red.green.blue"),
            Some(found(&[("list", list(&["red", "green", "blue"]))]))
        );
        assert_eq!(matched("", ""), Some(found(&[])));
        assert_eq!(matched("", "x"), None);
    }

    /// 100 KB hostile URIs: each match must do work linear in the URI (and template) length.
    #[test]
    fn hostile_uris_take_linear_work() {
        const LEN: usize = 100_000;
        let uris = [
            "a".repeat(LEN),
            "/".repeat(LEN),
            "%".repeat(LEN),
            ",".repeat(LEN),
            "=".repeat(LEN),
            "&".repeat(LEN),
            ";".repeat(LEN),
            ".".repeat(LEN),
            "%4".repeat(LEN / 2),
            "%41".repeat(LEN / 3),
            "%C3".repeat(LEN / 3),
            "é".repeat(LEN / 2),
            "/a".repeat(LEN / 2),
            "a=".repeat(LEN / 2),
            "?a=1&".repeat(LEN / 5),
            ";a=1".repeat(LEN / 4),
            "/here".repeat(LEN / 5),
            "-x".repeat(LEN / 2),
            format!("file:///{}", "ab/".repeat(LEN / 3)),
            format!("?{}", "q=1&".repeat(LEN / 4)),
            format!("{}?", "a".repeat(LEN)),
        ];
        let long_literal = format!("{{+a}}{}{{b}}", "-x".repeat(1000));
        let templates = [
            "file:///{path}",
            "file:///{+path}",
            "{x}",
            "{+x}{#y}",
            "{x,y,z}",
            "{list*}",
            "{/list*}",
            "{/a,b,c}.json",
            "{.a*}",
            "{;a*}",
            "{;a,b}{;c}",
            "{?q,lang}",
            "{?keys*}{&more*}",
            "{a}{b}{c}",
            "{+path}/here",
            "{+a}-{b}",
            "{x:5}{+y}",
            "x{+a}x{+b}x{+c}x",
            "é{x}é{y}",
            long_literal.as_str(),
        ];
        for text in templates {
            let t = template(text);
            for uri in &uris {
                let (result, work) = t.match_counting_work(uri);
                // Deterministic, and consistent with `matches`.
                assert_eq!(result, t.matches(uri), "{text}");
                let bound = 8 * (uri.len() + text.len()) + 64;
                assert!(
                    work <= bound,
                    "{text} on a {} byte URI: work {work}",
                    uri.len()
                );
                if let Some(vars) = result {
                    // What matched must be what the template can produce from those values.
                    let again = t.matches(uri);
                    assert_eq!(again, Some(vars), "{text}");
                }
            }
        }
        // Some exact results on them.
        let t = template("file:///{+path}");
        let uri = format!("file:///{}", "ab/".repeat(LEN / 3));
        assert_eq!(
            t.matches(&uri),
            Some(found(&[("path", s(&"ab/".repeat(LEN / 3)))]))
        );
        assert_eq!(template("file:///{path}").matches(&uri), None);
        let uri = "/a".repeat(LEN / 2);
        assert_eq!(
            template("{/list*}").matches(&uri),
            Some(found(&[(
                "list",
                VarValue::List(vec!["a".to_owned(); LEN / 2])
            )]))
        );
        assert_eq!(template("{x}").matches(&"%".repeat(LEN)), None);
        assert_eq!(
            template("{+a}-{b}").matches(&"-x".repeat(LEN / 2)),
            Some(found(&[
                ("a", s("")),
                ("b", s(&format!("{}x", "x-".repeat(LEN / 2 - 1))))
            ]))
        );
    }

    /// A small deterministic PRNG (xorshift64*).
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }

        fn below(&mut self, n: usize) -> usize {
            usize::try_from(self.next() % n as u64).unwrap_or(0)
        }
    }

    #[test]
    fn never_panics() {
        let templates = [
            "file:///{path}",
            "file:///{+path}{?q,lang}{&rest*}{#frag}",
            "repo://{owner}/{repo}/issues/{number}",
            "db://tables{/table,column}{.ext:3}{;p,q*}",
            "é{x:2,y*}%2Fa{.l*}-{/s:9999}",
            "{;a}{;b*}?x={+y:5}",
        ];
        let alphabet: Vec<char> = "{}%/?#&=;.,+*:!@|$ aA0_-~é😀\u{0}\u{7f}\u{85}2Fc3"
            .chars()
            .collect();
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let mut random_strings: Vec<String> = Vec::new();
        for _ in 0..300 {
            let len = rng.below(40);
            random_strings.push(
                (0..len)
                    .map(|_| alphabet[rng.below(alphabet.len())])
                    .collect(),
            );
            let bytes: Vec<u8> = (0..len).map(|_| (rng.next() >> 32) as u8).collect();
            random_strings.push(String::from_utf8_lossy(&bytes).into_owned());
        }
        let mut candidates: Vec<String> = Vec::new();
        for text in templates {
            for (i, _) in text.char_indices().chain([(text.len(), ' ')]) {
                candidates.push(text[..i].to_owned());
                candidates.push(text[i..].to_owned());
            }
        }
        candidates.extend(random_strings.iter().cloned());
        let vars = rfc_values();
        let mut parsed = 0;
        for candidate in &candidates {
            let Ok(t) = UriTemplate::parse(candidate) else {
                continue;
            };
            parsed += 1;
            let expanded = t.expand(&vars);
            let _ = t.matches(&expanded);
            for uri in random_strings.iter().take(60) {
                let _ = t.matches(uri);
                let _ = t.matches(&format!("{expanded}{uri}"));
            }
        }
        assert!(parsed > 50, "only {parsed} templates parsed");
        // Random templates made of template characters, matched against their own expansion.
        for _ in 0..2000 {
            let len = rng.below(24);
            let text: String = (0..len)
                .map(|_| alphabet[rng.below(alphabet.len())])
                .collect();
            if let Ok(t) = UriTemplate::parse(&text) {
                let expanded = t.expand(&vars);
                let _ = t.matches(&expanded);
            }
        }
    }

    /// Expanding random values and matching the result gives values that expand to the same URI.
    #[test]
    fn match_results_expand_back() {
        let templates = [
            "file:///{path}",
            "file:///{+path}",
            "repo://{owner}/{repo}/issues/{number}",
            "search://{?q,lang}",
            "db://tables{/table,column}",
            "weather://{city}{?units}",
            "{x,y}",
            "{/list*}",
            "{?list*}",
            "{;x,y}",
            "X{.x}",
            "{x:3}{y}",
            "{+x}#{y}",
        ];
        let alphabet: Vec<char> = "ab/?#&=;.,%+ é".chars().collect();
        let mut rng = Rng(42);
        for text in templates {
            let t = template(text);
            for _ in 0..300 {
                let mut vars = HashMap::new();
                for name in [
                    "path", "owner", "repo", "number", "q", "lang", "table", "column", "city",
                    "units", "x", "y",
                ] {
                    if rng.below(4) == 0 {
                        continue;
                    }
                    let len = rng.below(6);
                    let value: String = (0..len)
                        .map(|_| alphabet[rng.below(alphabet.len())])
                        .collect();
                    vars.insert(name.to_owned(), s(&value));
                }
                let items: Vec<String> = (0..rng.below(4))
                    .map(|_| {
                        (0..rng.below(4))
                            .map(|_| alphabet[rng.below(alphabet.len())])
                            .collect()
                    })
                    .collect();
                vars.insert("list".to_owned(), VarValue::List(items));
                let uri = t.expand(&vars);
                if let Some(back) = t.matches(&uri) {
                    let back: HashMap<String, VarValue> = back.into_iter().collect();
                    assert_eq!(t.expand(&back), uri, "{text}");
                }
            }
        }
    }
}
