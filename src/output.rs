//! How commands print times: RFC 3339 in `--json` output (with the unix milliseconds kept
//! beside them as `<field>_ms`), and with "in 4.2s" / "3.1s ago" for people.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

/// Unix milliseconds as RFC 3339, UTC, to the millisecond.
pub fn rfc3339(ms: i64) -> String {
    let at = UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_millis(at).to_string()
}

/// `at` relative to `now` (both unix ms): "in 4.2s", "3.1s ago".
pub fn relative(at: i64, now: i64) -> String {
    let secs = (at - now) as f64 / 1000.0;
    if secs >= 0.0 {
        format!("in {secs:.1}s")
    } else {
        format!("{:.1}s ago", -secs)
    }
}

/// A time for people: RFC 3339 and how far from now.
pub fn when(at: i64, now: i64) -> String {
    format!("{} ({})", rfc3339(at), relative(at, now))
}

/// Rewrites the named fields of a JSON object (unix ms) as RFC 3339, keeping the milliseconds
/// as `<field>_ms`. Null fields stay null.
pub fn with_times(mut value: Value, fields: &[&str]) -> Value {
    if let Value::Object(map) = &mut value {
        for field in fields {
            if let Some(ms) = map.get(*field).and_then(Value::as_i64) {
                map.insert(format!("{field}_ms"), ms.into());
                map.insert(field.to_string(), rfc3339(ms).into());
            }
        }
    }
    value
}

/// Now, in unix milliseconds.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Prints a list as a JSON array (`--json`, each item by `json`), or `empty` when there is
/// nothing to list. False when neither: the caller prints its table.
pub fn list_printed<T>(
    items: &[T],
    as_json: bool,
    json: impl Fn(&T) -> Value,
    empty: &str,
) -> bool {
    if as_json {
        println!("{}", Value::Array(items.iter().map(json).collect()));
    } else if items.is_empty() {
        println!("{empty}");
    } else {
        return false;
    }
    true
}

/// Text from outside (chat text, a far end's error, a session id) as it is printed for people:
/// control characters (ESC, which would let the text drive the terminal; carriage returns;
/// newlines) and the bidirectional overrides (which would let it reorder what is shown) are
/// written as escapes (`\u{1b}`, `\n`), so the text is shown, never obeyed.
pub fn shown(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        let bidi = matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
        if c.is_control() || bidi {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// The start of `text` (at most `max` bytes), on one line: newlines as spaces, then [`shown`].
pub fn excerpt(text: &str, max: usize) -> String {
    let text = text.replace('\n', " ");
    let head = relayq_engine::hooks::head_of(&text, max);
    if head.len() == text.len() {
        return shown(&text);
    }
    // Cut at a word's end (a long word alone is cut where it must be), and say it was cut.
    let cut = head
        .rfind(' ')
        .filter(|at| *at > max / 2)
        .map_or(head, |at| &head[..at]);
    format!("{}…", shown(cut.trim_end()))
}

/// Progress of long work (a prune, a bulk dead-letter operation) on stderr, rewritten in place
/// as `label done/total`, only when stderr is a terminal: scripts and logs get the final line
/// on stdout alone.
pub struct Progress {
    label: &'static str,
    total: Option<usize>,
    shown: bool,
}

impl Progress {
    /// `total` when known ahead.
    pub fn new(label: &'static str, total: Option<usize>) -> Self {
        use std::io::IsTerminal;
        Progress {
            label,
            total,
            shown: std::io::stderr().is_terminal(),
        }
    }

    pub fn update(&mut self, done: usize) {
        if !self.shown {
            return;
        }
        let of = self.total.map(|t| format!("/{t}")).unwrap_or_default();
        eprint!("\r{} {done}{of} row(s)…", self.label);
    }
}

impl Drop for Progress {
    /// Ends the progress line, so what follows starts on its own.
    fn drop(&mut self) {
        if self.shown {
            eprintln!();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outside_text_is_shown_not_obeyed_by_the_terminal() {
        assert_eq!(shown("red \u{1b}[31m\r\n"), "red \\u{1b}[31m\\r\\n");
        assert_eq!(shown("abc\u{202e}fed"), "abc\\u{202e}fed");
        assert_eq!(shown("é ✓ tab"), "é ✓ tab");
        assert_eq!(excerpt("one\ntwo \u{7}", 100), "one two \\u{7}");
    }

    #[test]
    fn times_are_rfc3339_with_the_milliseconds_kept() {
        assert_eq!(rfc3339(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
        let v = with_times(serde_json::json!({"at": 0, "none": null}), &["at", "none"]);
        assert_eq!(
            v,
            serde_json::json!({"at": "1970-01-01T00:00:00.000Z", "at_ms": 0, "none": null})
        );
        assert_eq!(relative(5_000, 800), "in 4.2s");
        assert_eq!(relative(0, 3_100), "3.1s ago");
    }
}
