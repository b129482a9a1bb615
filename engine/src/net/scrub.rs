//! Finding a secret's value in what a host answers, in the forms a host that reflects a
//! request gives it back, and putting the secret's placeholder there instead.
//!
//! A host a secret may be sent to can echo it: a debug endpoint, an error quoting the token, a
//! "whoami". Replacing only byte-for-byte copies is not enough: a reflector that answers the
//! value base64-encoded, hex-encoded, reversed, percent-encoded or `\u`-escaped in JSON hands
//! the program the value one decode away. So each value is looked for:
//! - as itself, reversed, and in hex, without regard to ASCII case (a header name comes back
//!   lowercased; hex in either case);
//! - in base64 and base64url, at each of the three alignments it can have inside a longer
//!   encoded text (`base64("Bearer " + value)` holds none of `base64(value)`'s characters
//!   where they would be alone): the characters that only the value's bits decide;
//! - in each of those forms once more in the text with one layer of escapes decoded, each
//!   escape where the text has it: `%XX`, `\uXXXX` (surrogate pairs too), `\xXX`, `\n`-style,
//!   and `&#N;`/`&#xN;`, mixed as a reflector likes.
//!
//! What a match covers in the text (escapes included) is replaced by the placeholder. What
//! remains is said in `docs/network.md`: a transform not listed here (two layers of escapes, a
//! cipher, compression inside the body, base64 broken over lines, the value split in parts).

use std::borrow::Cow;

use aho_corasick::AhoCorasick;
use base64::Engine as _;

/// Every secret's forms, compiled once per policy.
pub(crate) struct Scrubber {
    /// Forms matched without regard to ASCII case: the value, reversed, in hex.
    folded: Option<(AhoCorasick, Vec<usize>)>,
    /// Forms matched exactly: the value's base64 and base64url at each alignment.
    exact: Option<(AhoCorasick, Vec<usize>)>,
    placeholders: Vec<String>,
}

impl std::fmt::Debug for Scrubber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scrubber").field("secrets", &self.placeholders.len()).finish()
    }
}

/// A text's span that holds a secret in some form, and the secret's index.
type Hit = (usize, usize, usize);

impl Scrubber {
    /// The forms of each `(value, placeholder)`.
    pub(crate) fn new<'a>(secrets: impl IntoIterator<Item = (&'a [u8], &'a str)>) -> Scrubber {
        let (mut folded, mut folded_to, mut exact, mut exact_to, mut placeholders) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (i, (value, placeholder)) in secrets.into_iter().enumerate() {
            placeholders.push(placeholder.to_string());
            let reversed: Vec<u8> = value.iter().rev().copied().collect();
            for form in [value.to_vec(), reversed, hex::encode(value).into_bytes()] {
                folded.push(form);
                folded_to.push(i);
            }
            for form in base64_cores(value) {
                if !exact.contains(&form) {
                    exact.push(form);
                    exact_to.push(i);
                }
            }
        }
        let build = |patterns: Vec<Vec<u8>>, to: Vec<usize>, fold: bool| {
            (!patterns.is_empty()).then(|| {
                let automaton = AhoCorasick::builder()
                    .ascii_case_insensitive(fold)
                    .build(&patterns)
                    .expect("a few short literal patterns build");
                (automaton, to)
            })
        };
        Scrubber { folded: build(folded, folded_to, true), exact: build(exact, exact_to, false), placeholders }
    }

    /// `text` with every form of every value replaced by its placeholder.
    pub(crate) fn scrub(&self, text: &mut Vec<u8>) {
        if self.placeholders.is_empty() || text.is_empty() {
            return;
        }
        let mut hits = self.hits(text);
        if let Some(view) = View::decode(text) {
            hits.extend(self.hits(&view.bytes).into_iter().map(|(lo, hi, s)| {
                let (lo, hi) = view.original(lo, hi);
                (lo, hi, s)
            }));
        }
        if hits.is_empty() {
            return;
        }
        hits.sort_unstable();
        let mut out = Vec::with_capacity(text.len());
        let mut rest = 0;
        let mut hits = hits.into_iter().peekable();
        while let Some((lo, mut hi, secret)) = hits.next() {
            // Spans that overlap become one, named by the first.
            while let Some(&(next_lo, next_hi, _)) = hits.peek() {
                if next_lo >= hi {
                    break;
                }
                hi = hi.max(next_hi);
                hits.next();
            }
            if lo < rest {
                continue;
            }
            out.extend_from_slice(&text[rest..lo]);
            out.extend_from_slice(self.placeholders[secret].as_bytes());
            rest = hi;
        }
        out.extend_from_slice(&text[rest..]);
        *text = out;
    }

    /// [`Scrubber::scrub`] for text.
    pub(crate) fn scrub_text(&self, text: &str) -> String {
        let mut bytes = text.as_bytes().to_vec();
        self.scrub(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    }

    fn hits(&self, text: &[u8]) -> Vec<Hit> {
        let mut hits = Vec::new();
        for (automaton, to) in [&self.folded, &self.exact].into_iter().flatten() {
            hits.extend(
                automaton.find_overlapping_iter(text).map(|m| (m.start(), m.end(), to[m.pattern().as_usize()])),
            );
        }
        hits
    }
}

/// The characters of `value`'s base64 and base64url that its bits alone decide, at each of
/// the three offsets (in bytes, modulo 3) it may start at inside a longer encoded text.
fn base64_cores(value: &[u8]) -> Vec<Vec<u8>> {
    let mut cores = Vec::new();
    for offset in 0..3usize {
        let mut bytes = vec![0u8; offset];
        bytes.extend_from_slice(value);
        let bits = (offset * 8, (offset + value.len()) * 8);
        // Character i holds bits [6i, 6i + 6): only those wholly within the value's are its own.
        let first = bits.0.div_ceil(6);
        let end = bits.1 / 6;
        if end <= first {
            continue;
        }
        for engine in
            [&base64::engine::general_purpose::STANDARD_NO_PAD, &base64::engine::general_purpose::URL_SAFE_NO_PAD]
        {
            let encoded = engine.encode(&bytes).into_bytes();
            let core = encoded[first..end].to_vec();
            if !cores.contains(&core) {
                cores.push(core);
            }
        }
    }
    cores
}

/// A text with one layer of escapes decoded, and where each decoded escape came from.
struct View<'a> {
    bytes: Cow<'a, [u8]>,
    /// Each escape, in order: where its bytes start in the view and how many, where it
    /// starts in the text and how long it is there.
    escapes: Vec<Escape>,
}

#[derive(Clone, Copy)]
struct Escape {
    at: usize,
    len: usize,
    from: usize,
    was: usize,
}

impl View<'_> {
    /// `text` with its escapes decoded; `None` when it has none.
    fn decode(text: &[u8]) -> Option<View<'static>> {
        if !text.iter().any(|b| matches!(b, b'%' | b'\\' | b'&')) {
            return None;
        }
        let (mut bytes, mut escapes) = (Vec::with_capacity(text.len()), Vec::new());
        let mut i = 0;
        while i < text.len() {
            match escape(&text[i..]) {
                Some((decoded, was)) => {
                    escapes.push(Escape { at: bytes.len(), len: decoded.len(), from: i, was });
                    bytes.extend_from_slice(&decoded);
                    i += was;
                }
                None => {
                    bytes.push(text[i]);
                    i += 1;
                }
            }
        }
        (!escapes.is_empty()).then_some(View { bytes: Cow::Owned(bytes), escapes })
    }

    /// The text's span that the view's `lo..hi` was decoded from.
    fn original(&self, lo: usize, hi: usize) -> (usize, usize) {
        let (start, _) = self.place(lo);
        let (_, end) = self.place(hi - 1);
        (start, end)
    }

    /// Where the view's byte `at` comes from in the text: the start and end of its escape, or
    /// of the literal byte.
    fn place(&self, at: usize) -> (usize, usize) {
        let k = self.escapes.partition_point(|e| e.at <= at);
        match k.checked_sub(1).map(|k| self.escapes[k]) {
            Some(e) if at < e.at + e.len => (e.from, e.from + e.was),
            Some(e) => {
                let literal = e.from + e.was + (at - (e.at + e.len));
                (literal, literal + 1)
            }
            None => (at, at + 1),
        }
    }
}

/// The escape `text` starts with, decoded, and its length; `None` when it starts with none.
fn escape(text: &[u8]) -> Option<(Vec<u8>, usize)> {
    let hex_at = |from: usize, digits: usize| -> Option<u32> {
        let part = text.get(from..from + digits)?;
        std::str::from_utf8(part).ok().filter(|s| s.bytes().all(|b| b.is_ascii_hexdigit()))?;
        u32::from_str_radix(std::str::from_utf8(part).ok()?, 16).ok()
    };
    match (text.first()?, text.get(1)) {
        (b'%', _) => Some((vec![hex_at(1, 2)? as u8], 3)),
        (b'\\', Some(b'u')) => {
            let high = hex_at(2, 4)?;
            if (0xD800..0xDC00).contains(&high)
                && text.get(6..8) == Some(b"\\u")
                && let Some(low) = hex_at(8, 4).filter(|l| (0xDC00..0xE000).contains(l))
            {
                let c = char::from_u32(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))?;
                return Some((c.to_string().into_bytes(), 12));
            }
            Some((char::from_u32(high)?.to_string().into_bytes(), 6))
        }
        (b'\\', Some(b'x')) => Some((vec![hex_at(2, 2)? as u8], 4)),
        (b'\\', Some(&c)) => {
            let decoded = match c {
                b'n' => b'\n',
                b't' => b'\t',
                b'r' => b'\r',
                b'b' => 8,
                b'f' => 12,
                b'/' | b'\\' | b'"' | b'\'' => c,
                _ => return None,
            };
            Some((vec![decoded], 2))
        }
        (b'&', Some(b'#')) => {
            let (radix, digits_at) = if matches!(text.get(2), Some(b'x' | b'X')) { (16, 3) } else { (10, 2) };
            let digits = text[digits_at..].iter().take(8).take_while(|b| b.is_ascii_hexdigit()).count();
            if digits == 0 || text.get(digits_at + digits) != Some(&b';') {
                return None;
            }
            let number = std::str::from_utf8(&text[digits_at..digits_at + digits]).ok()?;
            let c = char::from_u32(u32::from_str_radix(number, radix).ok()?)?;
            Some((c.to_string().into_bytes(), digits_at + digits + 1))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};

    use super::*;

    const VALUE: &str = "s3cr3t-Value_0123+/xyz";
    const PLACEHOLDER: &str = "ptc-secret-TOKEN-0123456789ab";

    fn scrubbed(text: &str) -> String {
        Scrubber::new([(VALUE.as_bytes(), PLACEHOLDER)]).scrub_text(text)
    }

    /// The text shows nothing of the value: neither itself nor any listed form of it decodes
    /// from what is left.
    fn hidden(text: &str) {
        let out = scrubbed(text);
        assert!(out.contains(PLACEHOLDER), "not scrubbed: {text:?} -> {out:?}");
        for probe in [VALUE, "s3cr3t", "0123+/xyz"] {
            assert!(!out.to_lowercase().contains(&probe.to_lowercase()), "{probe} left in {out:?}");
        }
    }

    #[test]
    fn every_listed_form_is_found_where_a_reflector_puts_it() {
        let value = VALUE.as_bytes();
        let reversed: String = VALUE.chars().rev().collect();
        hidden(&format!("you sent {VALUE}."));
        hidden(&format!("x-leak-bearer{}", VALUE.to_lowercase()));
        hidden(&format!("shouted: {}", VALUE.to_uppercase()));
        hidden(&format!("backwards: {reversed}"));
        hidden(&format!("hex {} and {}", hex::encode(value), hex::encode_upper(value)));
        // base64 of the value behind prefixes of every length modulo 3, padded or not.
        for prefix in ["", "B", "Be", "Bearer ", "Bearer x"] {
            let whole = [prefix.as_bytes(), value].concat();
            hidden(&format!("{{\"auth\": \"{}\"}}", STANDARD.encode(&whole)));
            hidden(&format!("token={}", URL_SAFE_NO_PAD.encode(&whole)));
        }
        let percent: String = value.iter().map(|b| format!("%{b:02X}")).collect();
        hidden(&format!("/echo?q={percent}"));
        let json_escaped: String = VALUE.chars().map(|c| format!("\\u{:04x}", c as u32)).collect();
        hidden(&format!("{{\"header\": \"{json_escaped}\"}}"));
        let mixed: String = VALUE
            .chars()
            .enumerate()
            .map(|(i, c)| match i % 4 {
                0 => format!("\\u{:04X}", c as u32),
                1 => format!("%{:02x}", c as u32),
                2 => format!("&#{};", c as u32),
                _ => c.to_string(),
            })
            .collect();
        hidden(&format!("<p>{mixed}</p>"));
        // An escape of the hex form, and of the base64 form.
        let hex_escaped: String = hex::encode(value).chars().map(|c| format!("\\x{:02x}", c as u32)).collect();
        hidden(&hex_escaped);
    }

    #[test]
    fn a_match_takes_its_escapes_and_nothing_else() {
        let escaped: String = VALUE.chars().map(|c| format!("\\u{:04x}", c as u32)).collect();
        assert_eq!(scrubbed(&format!("{{\"a\": \"x{escaped}y\"}}")), format!("{{\"a\": \"x{PLACEHOLDER}y\"}}"));
        assert_eq!(scrubbed(&format!("a{VALUE}b{VALUE}c")), format!("a{PLACEHOLDER}b{PLACEHOLDER}c"));
        // A surrogate pair decodes as one character.
        assert_eq!(scrubbed("\\ud83d\\ude00 %zz \\q &#;"), "\\ud83d\\ude00 %zz \\q &#;");
    }

    #[test]
    fn a_value_that_looks_escaped_is_found_as_itself() {
        let value = "ab%41cd\\u0041";
        let s = Scrubber::new([(value.as_bytes(), "P")]);
        assert_eq!(s.scrub_text(&format!("[{value}]")), "[P]");
    }

    #[test]
    fn text_without_the_value_is_left_alone() {
        let text =
            r#"{"user": "ada", "path": "/a%20b", "html": "&#60;b&#62;", "esc": "\u00e9\n", "b64": "aGVsbG8gd29ybGQ="}"#;
        assert_eq!(scrubbed(text), text);
        let s = Scrubber::new(std::iter::empty());
        assert_eq!(s.scrub_text(text), text);
    }

    #[test]
    fn overlapping_forms_of_two_secrets_become_one_placeholder() {
        let s = Scrubber::new([(b"abcdef12".as_slice(), "P1"), (b"ef12ghij".as_slice(), "P2")]);
        assert_eq!(s.scrub_text("<abcdef12ghij>"), "<P1>");
    }
}
