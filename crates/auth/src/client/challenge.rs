//! `WWW-Authenticate` as the client reads it (RFC 9110 section 11.6.1): every challenge of every
//! header, each a scheme with a token68 or auth-params; what OAuth needs from them
//! (`resource_metadata` of RFC 9728 section 5.1, `scope` and `error` of RFC 6750 section 3, the
//! DPoP `algs` of RFC 9449 section 7.1).
//!
//! The parser never fails and never panics: a piece it cannot read is skipped up to the next
//! comma, and a header value longer than 8 KiB is ignored whole. It is lenient where servers
//! are: an unquoted value may hold any character but whitespace, a comma or a quote
//! (`scope=files:read`).

use http::HeaderMap;
use http::header::WWW_AUTHENTICATE;

/// The longest `WWW-Authenticate` value read: 8 KiB (longer ones are ignored).
const MAX_VALUE: usize = 8 * 1024;

/// One challenge: an authentication scheme and its parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    scheme: String,
    token68: Option<String>,
    params: Vec<(String, String)>,
}

impl Challenge {
    /// The scheme as the server wrote it (compare without case: [`is`](Challenge::is)).
    pub fn scheme(&self) -> &str {
        &self.scheme
    }

    /// Whether the scheme is `scheme`, ignoring ASCII case.
    pub fn is(&self, scheme: &str) -> bool {
        self.scheme.eq_ignore_ascii_case(scheme)
    }

    /// The value of the first parameter called `name` (ignoring ASCII case), unquoted.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The parameters in order, names lower-cased, values unquoted.
    pub fn params(&self) -> impl Iterator<Item = (&str, &str)> {
        self.params.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    /// The token68 (RFC 9110 section 11.2), for schemes that use one instead of parameters.
    pub fn token68(&self) -> Option<&str> {
        self.token68.as_deref()
    }

    /// Whether this is a challenge OAuth answers: `Bearer` (RFC 6750) or `DPoP` (RFC 9449).
    pub fn is_oauth(&self) -> bool {
        self.is("Bearer") || self.is("DPoP")
    }
}

/// Every challenge of a response, in order: those of the first `WWW-Authenticate` header, then
/// the next header's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Challenges(Vec<Challenge>);

impl Challenges {
    /// The challenges of every `WWW-Authenticate` header of `headers`.
    pub fn from_headers(headers: &HeaderMap) -> Challenges {
        let mut all = Vec::new();
        for value in headers.get_all(WWW_AUTHENTICATE) {
            parse_value(value.as_bytes(), &mut all);
        }
        Challenges(all)
    }

    /// The challenges of one header value.
    pub fn parse(value: &str) -> Challenges {
        let mut all = Vec::new();
        parse_value(value.as_bytes(), &mut all);
        Challenges(all)
    }

    /// Every challenge, in order.
    pub fn iter(&self) -> impl Iterator<Item = &Challenge> {
        self.0.iter()
    }

    /// Whether there is no challenge.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The first `Bearer` or `DPoP` challenge with the parameter `name`: its value.
    fn oauth_param(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .filter(|c| c.is_oauth())
            .find_map(|c| c.param(name))
    }

    /// The protected resource metadata URL (`resource_metadata`, RFC 9728 section 5.1): from a
    /// `Bearer` or `DPoP` challenge first, else from any challenge.
    pub fn resource_metadata(&self) -> Option<&str> {
        self.oauth_param("resource_metadata")
            .or_else(|| self.0.iter().find_map(|c| c.param("resource_metadata")))
    }

    /// The scopes the server asks for (`scope` of a `Bearer` or `DPoP` challenge, space
    /// separated; empty pieces dropped). Empty when no challenge names any.
    pub fn scopes(&self) -> Vec<String> {
        self.oauth_param("scope")
            .map(|scope| {
                scope
                    .split(' ')
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The OAuth error code (`error` of a `Bearer` or `DPoP` challenge): `invalid_token`,
    /// `insufficient_scope`, `use_dpop_nonce`...
    pub fn error(&self) -> Option<&str> {
        self.oauth_param("error")
    }

    /// Whether a `Bearer` or `DPoP` challenge says `error="insufficient_scope"`.
    pub fn insufficient_scope(&self) -> bool {
        self.0
            .iter()
            .any(|c| c.is_oauth() && c.param("error") == Some("insufficient_scope"))
    }

    /// The DPoP proof algorithms the server takes (`algs` of the `DPoP` challenge, RFC 9449
    /// section 7.1), if it names them.
    pub fn dpop_algs(&self) -> Option<Vec<String>> {
        self.0
            .iter()
            .filter(|c| c.is("DPoP"))
            .find_map(|c| c.param("algs"))
            .map(|algs| {
                algs.split(' ')
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
    }
}

/// RFC 9110 `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// RFC 9110 `token68` characters before the padding.
fn is_token68(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~+/".contains(&b)
}

/// A character of an unquoted parameter value, read leniently: anything but whitespace, a comma
/// and a double quote.
fn is_bare(b: u8) -> bool {
    !is_ws(b) && b != b',' && b != b'"'
}

fn is_ws(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn at_end(&self) -> bool {
        self.pos >= self.bytes.len()
    }

    fn skip_ws(&mut self) {
        while self.peek().is_some_and(is_ws) {
            self.pos += 1;
        }
    }

    fn take_while(&mut self, f: impl Fn(u8) -> bool) -> &[u8] {
        let start = self.pos;
        while self.peek().is_some_and(&f) {
            self.pos += 1;
        }
        &self.bytes[start..self.pos]
    }

    /// Skips past the next comma outside a quoted string (or to the end).
    fn skip_item(&mut self) {
        let mut quoted = false;
        while let Some(b) = self.peek() {
            self.pos += 1;
            match b {
                b'\\' if quoted => self.pos += 1,
                b'"' => quoted = !quoted,
                b',' if !quoted => return,
                _ => {}
            }
        }
        self.pos = self.pos.min(self.bytes.len());
    }

    /// At BWS then `,` or the end (consumed up to, not including, the comma).
    fn at_item_end(&mut self) -> bool {
        let save = self.pos;
        self.skip_ws();
        if self.at_end() || self.peek() == Some(b',') {
            true
        } else {
            self.pos = save;
            false
        }
    }

    /// A quoted-string (the cursor on its opening `"`): the unescaped value. An unterminated one
    /// runs to the end.
    fn quoted(&mut self) -> String {
        self.pos += 1;
        let mut out = Vec::new();
        while let Some(b) = self.peek() {
            self.pos += 1;
            match b {
                b'"' => break,
                b'\\' => {
                    if let Some(next) = self.peek() {
                        out.push(next);
                        self.pos += 1;
                    }
                }
                b => out.push(b),
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    /// An `auth-param` (`name BWS = BWS (token / quoted-string)`), or nothing (the cursor back
    /// where it was).
    fn auth_param(&mut self) -> Option<(String, String)> {
        let save = self.pos;
        let name = self.take_while(is_tchar);
        if name.is_empty() {
            self.pos = save;
            return None;
        }
        let name = String::from_utf8_lossy(name).to_ascii_lowercase();
        self.skip_ws();
        if self.peek() != Some(b'=') {
            self.pos = save;
            return None;
        }
        self.pos += 1;
        self.skip_ws();
        let value = match self.peek() {
            Some(b'"') => self.quoted(),
            // Leniently, any run of visible characters but a comma: servers write
            // `scope=files:read` unquoted, though `:` is not a token character.
            Some(b) if is_bare(b) && b != b'=' => {
                String::from_utf8_lossy(self.take_while(is_bare)).into_owned()
            }
            _ => {
                self.pos = save;
                return None;
            }
        };
        Some((name, value))
    }

    /// A `token68` followed by the end of the item, or nothing (the cursor back).
    fn token68(&mut self) -> Option<String> {
        let save = self.pos;
        let body = self.take_while(is_token68).len();
        if body == 0 {
            self.pos = save;
            return None;
        }
        self.take_while(|b| b == b'=');
        let token = String::from_utf8_lossy(&self.bytes[save..self.pos]).into_owned();
        if self.at_item_end() {
            Some(token)
        } else {
            self.pos = save;
            None
        }
    }
}

/// Appends the challenges of one header value to `out`.
fn parse_value(bytes: &[u8], out: &mut Vec<Challenge>) {
    if bytes.len() > MAX_VALUE {
        return;
    }
    let mut cursor = Cursor { bytes, pos: 0 };
    loop {
        // Empty list elements and separators.
        while cursor.peek().is_some_and(|b| is_ws(b) || b == b',') {
            cursor.pos += 1;
        }
        if cursor.at_end() {
            return;
        }
        let scheme = cursor.take_while(is_tchar);
        if scheme.is_empty() {
            cursor.skip_item();
            continue;
        }
        let mut challenge = Challenge {
            scheme: String::from_utf8_lossy(scheme).into_owned(),
            token68: None,
            params: Vec::new(),
        };
        // The scheme alone, or followed by at least one space.
        if !cursor.at_item_end() {
            if !cursor.peek().is_some_and(is_ws) {
                // `Bearer"x"`, `Basic/`: not a challenge.
                cursor.skip_item();
                continue;
            }
            cursor.skip_ws();
            if let Some(param) = cursor.auth_param() {
                challenge.params.push(param);
                if !cursor.at_item_end() {
                    // Trailing garbage after the parameter.
                    cursor.skip_item();
                }
                parse_params(&mut cursor, &mut challenge);
            } else if let Some(token) = cursor.token68() {
                challenge.token68 = Some(token);
            } else {
                // Neither: the rest of this item is unreadable.
                cursor.skip_item();
                parse_params(&mut cursor, &mut challenge);
            }
        }
        out.push(challenge);
    }
}

/// The parameters after the first one (the cursor at the end of an item, or at the start of
/// the next), up to the next challenge (a token not followed by `=`) or the end.
fn parse_params(cursor: &mut Cursor<'_>, challenge: &mut Challenge) {
    loop {
        while cursor.peek().is_some_and(|b| is_ws(b) || b == b',') {
            cursor.pos += 1;
        }
        if cursor.at_end() {
            return;
        }
        match cursor.auth_param() {
            Some(param) => {
                challenge.params.push(param);
                if !cursor.at_item_end() {
                    cursor.skip_item();
                }
            }
            // A token without `=`: the next challenge's scheme.
            None if cursor.peek().is_some_and(is_tchar) => return,
            None => cursor.skip_item(),
        }
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    fn parse(value: &str) -> Vec<Challenge> {
        Challenges::parse(value).0
    }

    fn params(c: &Challenge) -> Vec<(&str, &str)> {
        c.params().collect()
    }

    #[test]
    fn a_bearer_challenge_with_quoted_and_token_values() {
        let all = parse(
            r#"Bearer error="invalid_token", error_description="The access token expired", resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource/mcp", scope=files:read"#,
        );
        assert_eq!(all.len(), 1);
        assert!(all[0].is("bearer"));
        assert_eq!(
            params(&all[0]),
            [
                ("error", "invalid_token"),
                ("error_description", "The access token expired"),
                (
                    "resource_metadata",
                    "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"
                ),
                ("scope", "files:read"),
            ]
        );
    }

    #[test]
    fn several_challenges_commas_in_quotes_quoted_pairs_and_case() {
        let all = parse(
            r#"Basic realm="a, b", DPoP algs="ES256 PS256", error="use_dpop_nonce" , BEARER Scope="x \"y\" z", RESOURCE_METADATA = "https://m/a,b""#,
        );
        let schemes: Vec<_> = all.iter().map(Challenge::scheme).collect();
        assert_eq!(schemes, ["Basic", "DPoP", "BEARER"]);
        assert_eq!(all[0].param("realm"), Some("a, b"));
        assert_eq!(all[1].param("algs"), Some("ES256 PS256"));
        assert_eq!(all[1].param("ERROR"), Some("use_dpop_nonce"));
        assert_eq!(all[2].param("scope"), Some(r#"x "y" z"#));
        assert_eq!(all[2].param("resource_metadata"), Some("https://m/a,b"));
        let challenges = Challenges::parse(
            r#"Basic realm="a, b", DPoP algs="ES256 PS256", error="use_dpop_nonce" , BEARER Scope="x \"y\" z""#,
        );
        // The DPoP challenge comes first: its error is the one reported.
        assert_eq!(challenges.error(), Some("use_dpop_nonce"));
        assert_eq!(
            challenges.dpop_algs(),
            Some(vec!["ES256".to_owned(), "PS256".to_owned()])
        );
        assert_eq!(challenges.scopes(), ["x", "\"y\"", "z"]);
    }

    #[test]
    fn token68_and_schemes_without_parameters() {
        let all = parse("Negotiate, Basic YWxhZGRpbjpvcGVuc2VzYW1l==, NTLM, Bearer");
        let schemes: Vec<_> = all.iter().map(Challenge::scheme).collect();
        assert_eq!(schemes, ["Negotiate", "Basic", "NTLM", "Bearer"]);
        assert_eq!(all[1].token68(), Some("YWxhZGRpbjpvcGVuc2VzYW1l=="));
        assert!(all[1].params().next().is_none());
        assert_eq!(all[3].token68(), None);
        // A token68 of `/` and `+` characters, then a challenge with parameters.
        let all = parse("Custom a/b+c=, Bearer realm=x");
        assert_eq!(all[0].token68(), Some("a/b+c="));
        assert_eq!(all[1].param("realm"), Some("x"));
    }

    #[test]
    fn every_header_is_read_in_order() {
        let mut headers = HeaderMap::new();
        headers.append(
            WWW_AUTHENTICATE,
            HeaderValue::from_static(r#"DPoP algs="ES256", error="use_dpop_nonce""#),
        );
        headers.append(
            WWW_AUTHENTICATE,
            HeaderValue::from_static(
                r#"Bearer resource_metadata="https://r/.well-known/oauth-protected-resource", scope="mcp:basic mcp:write", error="insufficient_scope""#,
            ),
        );
        let challenges = Challenges::from_headers(&headers);
        assert_eq!(challenges.iter().count(), 2);
        assert_eq!(
            challenges.resource_metadata(),
            Some("https://r/.well-known/oauth-protected-resource")
        );
        assert_eq!(challenges.scopes(), ["mcp:basic", "mcp:write"]);
        assert!(challenges.insufficient_scope());
        assert_eq!(challenges.error(), Some("use_dpop_nonce"));
        assert!(Challenges::from_headers(&HeaderMap::new()).is_empty());
    }

    #[test]
    fn oauth_parameters_come_from_bearer_or_dpop_first() {
        let challenges = Challenges::parse(
            r#"Basic realm="x", resource_metadata="https://basic/", scope="basic", Bearer resource_metadata="https://bearer/""#,
        );
        assert_eq!(challenges.resource_metadata(), Some("https://bearer/"));
        // `scope` and `error` of another scheme are not OAuth's.
        assert!(challenges.scopes().is_empty());
        assert_eq!(challenges.error(), None);
        assert!(!challenges.insufficient_scope());
        // `resource_metadata` of any scheme is taken when no OAuth challenge has one.
        let challenges = Challenges::parse(r#"Custom resource_metadata="https://m/""#);
        assert_eq!(challenges.resource_metadata(), Some("https://m/"));
        // `insufficient_scope` of a non-OAuth scheme does not count.
        assert!(!Challenges::parse(r#"Basic error="insufficient_scope""#).insufficient_scope());
        // Empty scopes are none.
        assert!(
            Challenges::parse(r#"Bearer scope="  ""#)
                .scopes()
                .is_empty()
        );
    }

    #[test]
    fn garbage_is_skipped_never_a_panic() {
        for value in [
            "",
            ",,, ,",
            "=",
            "\"",
            "Bearer \"",
            "Bearer =x",
            "Bearer realm=",
            "Bearer realm=\"unterminated",
            "Bearer realm=\"a\\",
            "Bearer realm=x y z",
            "Bearer, ,=, \"x\"",
            "Bearer\"x\"",
            "\u{0}\u{7f}",
            "Bearer realm=\"é\", scope=ü",
            "Bearer a=b c=d",
            "Bearer ====",
        ] {
            let _ = parse(value);
            let _ = Challenges::parse(value).scopes();
        }
        // What can be read around garbage is read.
        let all = parse(r#"@@@, Bearer =x, scope="a", Basic realm=r junk, DPoP algs=ES256"#);
        let schemes: Vec<_> = all.iter().map(Challenge::scheme).collect();
        assert_eq!(schemes, ["Bearer", "Basic", "DPoP"]);
        assert_eq!(all[0].param("scope"), Some("a"));
        assert_eq!(all[1].param("realm"), Some("r"));
        assert_eq!(all[2].param("algs"), Some("ES256"));
        let unterminated = parse("Bearer realm=\"abc");
        assert_eq!(unterminated[0].param("realm"), Some("abc"));
        // Bytes that are not UTF-8 are replaced, not a failure.
        let mut headers = HeaderMap::new();
        headers.append(
            WWW_AUTHENTICATE,
            HeaderValue::from_bytes(b"Bearer scope=\"a\xffb\"").unwrap(),
        );
        assert_eq!(Challenges::from_headers(&headers).scopes(), ["a\u{FFFD}b"]);
    }

    #[test]
    fn random_inputs_never_panic() {
        // A small xorshift over the characters that matter to the grammar.
        const ALPHABET: &[u8] = b"Bearer DPoP=\",\\ \t/+~:_a1\xff\x00";
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..20_000 {
            let mut value = Vec::new();
            let len = (state % 40) as usize;
            for _ in 0..len {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                value.push(ALPHABET[(state % ALPHABET.len() as u64) as usize]);
            }
            let mut out = Vec::new();
            parse_value(&value, &mut out);
            let challenges = Challenges(out);
            let _ = (
                challenges.scopes(),
                challenges.error(),
                challenges.dpop_algs(),
            );
            let _ = challenges.resource_metadata();
        }
    }

    #[test]
    fn values_over_8_kib_are_ignored() {
        let long = format!(r#"Bearer scope="{}""#, "a".repeat(MAX_VALUE));
        assert!(Challenges::parse(&long).is_empty());
        let fits = format!(r#"Bearer scope="{}""#, "a".repeat(MAX_VALUE - 20));
        assert_eq!(Challenges::parse(&fits).scopes().len(), 1);
        // A header of many challenges within the bound is read whole.
        let many = "Bearer a=b, ".repeat(600);
        assert_eq!(Challenges::parse(&many).iter().count(), 600);
    }
}
