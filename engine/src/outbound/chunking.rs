//! Splitting a text too long for its platform into ordered parts, each within the platform's
//! limit, cut where a reader would cut it: at a paragraph, else a line, else a space, else
//! between two characters (never inside one). Markup stays valid in every part: a fenced code
//! block or an HTML tag open at a cut is closed at the end of the part and opened again at the
//! start of the next; a cut never falls inside a tag or an `&entity;`.
//!
//! Lengths are counted in UTF-16 code units, as Telegram counts them: an emoji counts as two.
//! Discord and Slack count characters, so the count is never under theirs.

use serde::{Deserialize, Serialize};

/// How the far end reads a message's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Markup {
    /// As is: parts joined are the text.
    #[default]
    Plain,
    /// Markdown (Discord, Slack mrkdwn): ``` code fences are kept whole per part.
    Markdown,
    /// Telegram's HTML: tags and entities are kept whole, open tags closed and reopened.
    Html,
}

/// The longest text a channel's platform takes in one message, and how it reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TextLimit {
    /// In UTF-16 code units (see the module's doc).
    pub max: usize,
    pub markup: Markup,
}

/// The smallest limit a text can be split for: room for markup closed and reopened.
pub const MIN_LIMIT: usize = 64;

/// The length the platforms count: UTF-16 code units.
pub fn length(text: &str) -> usize {
    text.encode_utf16().count()
}

/// `text` in parts of at most `limit.max` units each (one part when it fits). Whitespace-only
/// parts are left out; otherwise, for plain text, the parts joined are `text`.
pub fn split(text: &str, limit: TextLimit) -> Vec<String> {
    let max = limit.max.max(MIN_LIMIT);
    let mut parts = Vec::new();
    let mut open = Open::default();
    let mut rest = text;
    while !rest.is_empty() {
        let reopen = open.reopen();
        if length(&reopen) + length(rest) <= max {
            parts.push(reopen + rest);
            break;
        }
        let mut budget = max.saturating_sub(length(&reopen)).max(1);
        let (part, cut, after) = loop {
            let cut = best_cut(rest, budget, limit.markup);
            let after = open.clone().scan(&rest[..cut], limit.markup);
            let part = format!("{reopen}{}{}", &rest[..cut], after.close(&rest[..cut]));
            let over = length(&part).saturating_sub(max);
            if over == 0 || budget == 1 {
                break (part, cut, after);
            }
            budget = budget.saturating_sub(over).max(1);
        };
        if !part[reopen.len()..].trim().is_empty() {
            parts.push(part);
        }
        open = after;
        rest = &rest[cut..];
    }
    parts.retain(|p| !p.trim().is_empty());
    parts
}

/// The best place to cut `text` so that the part before holds at most `budget` units: after
/// the last blank line, else the last line break, else the last run of spaces, else the last
/// character boundary; never inside a tag or entity (HTML). At least one character is taken.
fn best_cut(text: &str, budget: usize, markup: Markup) -> usize {
    let mut units = 0;
    let mut fits = 0; // the longest prefix (bytes) within budget
    for (i, c) in text.char_indices() {
        units += c.len_utf16();
        if units > budget {
            break;
        }
        fits = i + c.len_utf8();
    }
    if fits == 0 {
        // Not even one character fits: take one anyway rather than loop forever.
        return text.chars().next().map_or(0, char::len_utf8);
    }
    let head = &text[..fits];
    let allowed = |at: usize| at > 0 && at <= fits && !inside_markup(&text[..at], markup);
    // A cut after a whitespace run, so that the next part starts with a visible character.
    let after_run = |pattern: &str| {
        head.rmatch_indices(pattern)
            .map(|(i, p)| i + p.len())
            .map(|at| at + whitespace_len(&text[at..], fits - at))
            .find(|&at| allowed(at))
    };
    after_run("\n\n")
        .or_else(|| after_run("\n"))
        .or_else(|| after_run(" "))
        .or_else(|| {
            head.char_indices()
                .map(|(i, c)| i + c.len_utf8())
                .rev()
                .find(|&at| allowed(at))
        })
        .unwrap_or(fits)
}

/// The bytes of whitespace at the start of `text`, at most `room`.
fn whitespace_len(text: &str, room: usize) -> usize {
    text.char_indices()
        .take_while(|&(i, c)| c.is_whitespace() && i + c.len_utf8() <= room)
        .map(|(_, c)| c.len_utf8())
        .sum()
}

/// Whether `before` ends inside an HTML tag or entity (so no cut may fall there).
fn inside_markup(before: &str, markup: Markup) -> bool {
    if markup != Markup::Html {
        return false;
    }
    let tag = before
        .rfind('<')
        .is_some_and(|lt| !before[lt..].contains('>'));
    let entity = before.rfind('&').is_some_and(|amp| {
        let tail = &before[amp + 1..];
        tail.len() <= 10 && tail.chars().all(|c| c.is_ascii_alphanumeric() || c == '#')
    });
    tag || entity
}

/// What markup is open at a point of the text, to close at a cut and open again after it.
#[derive(Debug, Clone, Default)]
struct Open {
    /// The line that opened a code fence still open (e.g. "```rust").
    fence: Option<String>,
    /// The opening tags still open, outermost first (HTML).
    tags: Vec<(String, String)>,
}

impl Open {
    /// The state after `text`.
    fn scan(mut self, text: &str, markup: Markup) -> Self {
        match markup {
            Markup::Plain => {}
            Markup::Markdown => {
                for line in text.split_inclusive('\n') {
                    let fence = line.trim();
                    if fence.starts_with("```") {
                        self.fence = match self.fence {
                            Some(_) => None,
                            None => Some(fence.to_string()),
                        };
                    }
                }
            }
            Markup::Html => {
                let mut rest = text;
                while let Some(lt) = rest.find('<') {
                    let Some(gt) = rest[lt..].find('>') else {
                        break;
                    };
                    let tag = &rest[lt..lt + gt + 1];
                    let name: String = tag
                        .trim_start_matches(['<', '/'])
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                        .collect::<String>()
                        .to_ascii_lowercase();
                    if tag.starts_with("</") {
                        if let Some(at) = self.tags.iter().rposition(|(n, _)| *n == name) {
                            self.tags.truncate(at);
                        }
                    } else if !tag.ends_with("/>") && !name.is_empty() {
                        self.tags.push((name, tag.to_string()));
                    }
                    rest = &rest[lt + gt + 1..];
                }
            }
        }
        self
    }

    /// What ends a part that stops here (after `part`'s text).
    fn close(&self, part: &str) -> String {
        let mut close = String::new();
        if self.fence.is_some() {
            if !part.ends_with('\n') {
                close.push('\n');
            }
            close.push_str("```");
        }
        for (name, _) in self.tags.iter().rev() {
            close.push_str(&format!("</{name}>"));
        }
        close
    }

    /// What starts the next part.
    fn reopen(&self) -> String {
        let mut open: String = self.tags.iter().map(|(_, tag)| tag.as_str()).collect();
        if let Some(fence) = &self.fence {
            open.push_str(fence);
            open.push('\n');
        }
        open
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(max: usize, markup: Markup) -> TextLimit {
        TextLimit { max, markup }
    }

    fn check_lengths(parts: &[String], max: usize) {
        for p in parts {
            assert!(length(p) <= max, "{} > {max}: {p:?}", length(p));
        }
    }

    #[test]
    fn a_text_that_fits_is_one_part() {
        assert_eq!(split("hello", limit(100, Markup::Plain)), vec!["hello"]);
    }

    #[test]
    fn plain_text_is_cut_at_paragraphs_then_lines_then_spaces_and_joins_back() {
        let para = "word ".repeat(10); // 50 bytes
        let text = format!("{para}\n\n{para}\n{para}");
        let parts = split(&text, limit(80, Markup::Plain));
        check_lengths(&parts, 80);
        assert_eq!(parts.concat(), text);
        assert!(
            parts[0].ends_with("\n\n"),
            "cut after the blank line: {parts:?}"
        );
        let words = "alpha beta gamma delta ".repeat(20);
        let parts = split(&words, limit(64, Markup::Plain));
        check_lengths(&parts, 64);
        assert_eq!(parts.concat(), words);
        for p in &parts[..parts.len() - 1] {
            assert!(p.ends_with(' '), "cut at a space: {p:?}");
            assert!(!p.starts_with(' '));
        }
    }

    #[test]
    fn a_cut_never_falls_inside_a_character_and_emoji_count_as_two() {
        let text = "é😀".repeat(100); // no spaces: cut between characters
        let parts = split(&text, limit(65, Markup::Plain));
        check_lengths(&parts, 65);
        assert_eq!(parts.concat(), text);
        assert!(parts.len() >= 300 / 65);
    }

    #[test]
    fn a_code_fence_open_at_a_cut_is_closed_and_opened_again() {
        let code: String = (0..30).map(|i| format!("let x{i} = {i};\n")).collect();
        let text = format!("Look:\n```rust\n{code}```\ndone");
        let parts = split(&text, limit(120, Markup::Markdown));
        check_lengths(&parts, 120);
        assert!(parts.len() > 2);
        for p in &parts {
            assert_eq!(p.matches("```").count() % 2, 0, "fences balanced: {p:?}");
        }
        assert!(parts[1].starts_with("```rust\n"), "{:?}", parts[1]);
    }

    #[test]
    fn html_tags_and_entities_are_never_cut_and_open_tags_are_carried_over() {
        let body = "bold &amp; brave ".repeat(20);
        let text = format!("<b>{body}</b> and <a href=\"https://x.example/\">link</a>");
        let parts = split(&text, limit(70, Markup::Html));
        check_lengths(&parts, 70);
        assert!(
            parts[1].starts_with("<b>"),
            "the open tag is opened again: {parts:?}"
        );
        for p in &parts {
            assert_eq!(p.matches("<b>").count(), p.matches("</b>").count(), "{p:?}");
            assert_eq!(p.matches('<').count(), p.matches('>').count(), "{p:?}");
            let amp = p.matches('&').count();
            assert_eq!(amp, p.matches("&amp;").count(), "entity cut: {p:?}");
        }
    }

    #[test]
    fn whitespace_only_parts_are_left_out() {
        let text = format!("{}{}", "a ".repeat(40), " ".repeat(200));
        let parts = split(&text, limit(64, Markup::Plain));
        assert!(parts.iter().all(|p| !p.trim().is_empty()), "{parts:?}");
    }
}
