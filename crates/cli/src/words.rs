//! A small POSIX-shell-like split of a command line into words: whitespace separates words,
//! single quotes keep everything literally, double quotes keep everything but `\"`, `\\`, `\$`
//! and `` \` ``, and a backslash outside quotes escapes the next character. No expansion of any
//! kind (variables, globs, `~`).

/// Splits `line` into words, or says why it cannot.
pub(crate) fn split(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err("unterminated single quote".into()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '$' | '`')) => word.push(c),
                            Some('\n') => {}
                            Some(c) => {
                                word.push('\\');
                                word.push(c);
                            }
                            None => return Err("unterminated double quote".into()),
                        },
                        Some(c) => word.push(c),
                        None => return Err("unterminated double quote".into()),
                    }
                }
            }
            '\\' => match chars.next() {
                Some('\n') => {}
                Some(c) => {
                    in_word = true;
                    word.push(c);
                }
                None => return Err("a backslash at the end".into()),
            },
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::split;

    fn ok(line: &str) -> Vec<String> {
        split(line).unwrap()
    }

    #[test]
    fn splits_like_a_shell() {
        assert_eq!(ok("  a  b\tc "), ["a", "b", "c"]);
        assert_eq!(
            ok(r#"npx -y "@scope/pkg name" 'it''s'"#),
            ["npx", "-y", "@scope/pkg name", "its"]
        );
        assert_eq!(ok(r#"a\ b "x\"y" 'q\n'"#), ["a b", "x\"y", "q\\n"]);
        assert_eq!(ok(r#""" ''"#), ["", ""]);
        assert_eq!(ok(r#""a\b""#), ["a\\b"]);
        assert!(ok("").is_empty());
    }

    #[test]
    fn reports_unterminated_quotes() {
        assert!(split("'a").is_err());
        assert!(split("\"a").is_err());
        assert!(split("a\\").is_err());
    }
}
