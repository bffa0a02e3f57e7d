//! RFC 6570 URI templates, levels 1 to 4, for MCP resource templates.
//!
//! A resource template (`resources/templates/list`) carries a `uriTemplate`. The server
//! [parses](UriTemplate::parse) it when the template is registered, [matches](UriTemplate::matches)
//! the URI of each `resources/read` against the registered templates to find the handler and its
//! arguments. The server never expands a template; the tests expand with the `iri-string` crate,
//! an RFC 6570 implementation independent of this one, and match what it produced (`tests.rs`).
//!
//! The parser and the types are here; the matcher is in `matcher.rs`.
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
//! What matching inverts (the server does not expand; the tests check that URIs expanded by
//! `iri-string` match back to their values). Exactly RFC 6570 section 3 and appendix A: per-operator first string, separator, named / `ifemp`
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

use std::collections::{BTreeMap, HashSet};

mod matcher;
#[cfg(test)]
mod tests;

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

    /// Matches a URI; on success the value of each variable that appeared (undefined ones are
    /// absent). See the module documentation for the rules.
    pub(crate) fn matches(&self, uri: &str) -> Option<BTreeMap<String, VarValue>> {
        self.match_counting_work(uri).0
    }

    /// [`matches`](Self::matches), also returning the work done: the number of URI bytes visited
    /// over all passes, which stays within a small multiple of the URI and template lengths.
    fn match_counting_work(&self, uri: &str) -> (Option<BTreeMap<String, VarValue>>, usize) {
        matcher::run(&self.parts, uri)
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
