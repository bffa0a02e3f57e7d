//! Matching a URI against a parsed template: one left-to-right pass, no backtracking (the rules
//! are in the parent module's documentation).

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::collections::btree_map::Entry;

use super::{Expr, Modifier, Op, Part, VarSpec, VarValue, hex_at, hex_value, slice};

/// Matches `uri` against `parts`: the variables found, if it matches, and the work done (the URI
/// bytes visited over all passes).
pub(super) fn run(parts: &[Part], uri: &str) -> (Option<BTreeMap<String, VarValue>>, usize) {
    let mut matcher = Matcher {
        uri,
        bytes: uri.as_bytes(),
        pos: 0,
        work: 0,
        out: BTreeMap::new(),
    };
    let matched = matcher.run(parts).is_some() && matcher.pos == uri.len();
    (matched.then_some(matcher.out), matcher.work)
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
