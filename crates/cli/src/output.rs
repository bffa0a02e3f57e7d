//! Human-readable output: aligned tables and content blocks.

use serde_json::Value;

/// Prints `rows` under `headers` in aligned columns (the last column is not padded; no header
/// line when the headers are all empty).
pub(crate) fn table(headers: &[&str], rows: &[Vec<String>]) {
    print!("{}", format_table(headers, rows));
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

/// Writes one line to stdout (see `say!`): on a closed pipe the program ends with status 0; on
/// any other write error it says so and ends with status 1.
pub(crate) fn line(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let written = out
        .write_fmt(args)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush());
    if let Err(e) = written {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("mcx: cannot write the output: {e}");
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
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
