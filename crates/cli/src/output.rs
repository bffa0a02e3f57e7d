//! Human-readable output: aligned tables and content blocks.
//!
//! Most of what mcx prints comes from the server (tool names and descriptions, text content, log
//! data, error messages): on a terminal, control characters in it are shown escaped ([`escape`]),
//! so that a hostile server cannot send the terminal escape sequences (an OSC 52 clipboard
//! write, a spoofed hyperlink, cursor movements).

use std::borrow::Cow;
use std::io::IsTerminal;
use std::sync::OnceLock;

use serde_json::Value;

/// `text` with every control character but newline and tab shown escaped: C0 controls (ESC,
/// CR, BEL, ...) and DEL as `\x1b`, C1 controls (U+0080 to U+009F) as `\u{9b}`. What is left
/// cannot start an escape sequence. Borrowed when there is nothing to escape.
pub(crate) fn escape(text: &str) -> Cow<'_, str> {
    let unsafe_char = |c: char| c.is_control() && c != '\n' && c != '\t';
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if !unsafe_char(c) {
            out.push(c);
        } else if (c as u32) < 0x80 {
            out.push_str(&format!("\\x{:02x}", c as u32));
        } else {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        }
    }
    Cow::Owned(out)
}

/// Whether stdout is a terminal (asked once).
fn stdout_is_terminal() -> bool {
    static TERMINAL: OnceLock<bool> = OnceLock::new();
    *TERMINAL.get_or_init(|| std::io::stdout().is_terminal())
}

/// Whether stderr is a terminal (asked once).
pub(crate) fn stderr_is_terminal() -> bool {
    static TERMINAL: OnceLock<bool> = OnceLock::new();
    *TERMINAL.get_or_init(|| std::io::stderr().is_terminal())
}

/// `text` as it may go to stderr: escaped when stderr is a terminal.
pub(crate) fn for_stderr(text: &str) -> Cow<'_, str> {
    if stderr_is_terminal() {
        escape(text)
    } else {
        Cow::Borrowed(text)
    }
}

/// Prints `rows` under `headers` in aligned columns (the last column is not padded; no header
/// line when the headers are all empty).
pub(crate) fn table(headers: &[&str], rows: &[Vec<String>]) {
    let rows: Vec<Vec<String>> = if stdout_is_terminal() {
        // Escaped before the widths are measured, so that the columns stay aligned.
        rows.iter()
            .map(|row| row.iter().map(|cell| escape(cell).into_owned()).collect())
            .collect()
    } else {
        rows.to_vec()
    };
    let text = format_table(headers, &rows);
    line(format_args!("{}", text.strip_suffix('\n').unwrap_or(&text)));
}

/// [`table`] as a string.
pub(crate) fn format_table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let mut out = String::new();
    let header: Vec<String> = headers.iter().map(|h| (*h).to_owned()).collect();
    // No header line when every header is empty.
    let header = headers.iter().any(|h| !h.is_empty()).then_some(&header);
    for row in header.into_iter().chain(rows) {
        let last = row.len().saturating_sub(1);
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i == last {
                line.push_str(cell);
            } else {
                let pad = widths[i].saturating_sub(cell.chars().count());
                line.push_str(cell);
                line.push_str(&" ".repeat(pad + 2));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// The first line of a description, or "".
pub(crate) fn first_line(value: &Value) -> String {
    value
        .as_str()
        .and_then(|s| s.lines().next())
        .unwrap_or("")
        .to_owned()
}

/// A string field, or "".
pub(crate) fn field(value: &Value, name: &str) -> String {
    value[name].as_str().unwrap_or("").to_owned()
}

/// A content block (of a tool result or prompt message) as text.
pub(crate) fn content(block: &Value) -> String {
    match block["type"].as_str().unwrap_or("") {
        "text" => field(block, "text"),
        "image" | "audio" => format!(
            "[{} {}, {} bytes of base64]",
            field(block, "type"),
            field(block, "mimeType"),
            block["data"].as_str().map_or(0, str::len)
        ),
        "resource_link" => format!("[link {} {}]", field(block, "uri"), field(block, "name")),
        "resource" => resource_contents(&block["resource"]),
        _ => block.to_string(),
    }
}

/// Resource contents (text, or a note about binary contents).
pub(crate) fn resource_contents(contents: &Value) -> String {
    match contents["text"].as_str() {
        Some(text) => text.to_owned(),
        None => format!(
            "[binary {} {}, {} bytes of base64]",
            field(contents, "uri"),
            field(contents, "mimeType"),
            contents["blob"].as_str().map_or(0, str::len)
        ),
    }
}

/// Prints `value` as pretty JSON on stdout.
pub(crate) fn print_json(value: &Value) {
    line(format_args!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
    ));
}

/// Writes one line to stdout (see `say!`), escaped on a terminal (see [`escape`]): on a closed
/// pipe the program ends with status 0; on any other write error it says so and ends with
/// status 1.
pub(crate) fn line(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let text = args.to_string();
    let text = if stdout_is_terminal() {
        escape(&text)
    } else {
        Cow::Borrowed(text.as_str())
    };
    let mut out = std::io::stdout().lock();
    let written = out
        .write_all(text.as_bytes())
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush());
    if let Err(e) = written {
        // Whatever a question on the terminal held back is said before the end.
        crate::progress::release();
        // The process ends here: what `--otlp` recorded is sent first.
        crate::otel::flush();
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("mcx: cannot write the output: {e}");
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn finding_23_escape_shows_control_characters_escaped() {
        // OSC 52 (a clipboard write), a CSI sequence, CR, DEL, a C1 CSI: all shown, none raw.
        assert_eq!(
            escape("a\u{1b}]52;c;ZXZpbA==\u{7}b"),
            "a\\x1b]52;c;ZXZpbA==\\x07b"
        );
        assert_eq!(escape("\u{1b}[2J\r\u{7f}"), "\\x1b[2J\\x0d\\x7f");
        assert_eq!(escape("x\u{9b}31m"), "x\\u{9b}31m");
        assert_eq!(escape("\0"), "\\x00");
        // Newlines, tabs, backslashes and other text are left alone, without a copy.
        let plain = "line one\n\tl\u{e9}gende \\x1b \u{1F600}";
        assert_eq!(escape(plain), plain);
        assert!(matches!(escape(plain), std::borrow::Cow::Borrowed(_)));
        for c in (0u32..0x110000).filter_map(char::from_u32) {
            let shown = escape(&c.to_string()).into_owned();
            assert!(
                !shown
                    .chars()
                    .any(|c| c.is_control() && c != '\n' && c != '\t'),
                "{c:?} -> {shown:?}"
            );
        }
    }

    #[test]
    fn columns_are_aligned() {
        let rows = vec![
            vec!["echo".to_owned(), "Says it".to_owned()],
            vec!["countdown".to_owned(), String::new()],
        ];
        assert_eq!(
            super::format_table(&["NAME", "DESCRIPTION"], &rows),
            "NAME       DESCRIPTION\necho       Says it\ncountdown\n"
        );
    }
}
