//! Notices in Telegram HTML (`parse_mode = "HTML"`).

use relayq_engine::Notice;

use crate::channels::notice::question;
use crate::kit::cut_chars;

/// Telegram's limit on a message's text, in characters after entities are parsed.
pub const TELEGRAM_MAX_CHARS: usize = 4096;

/// Telegram HTML (`parse_mode = "HTML"`): the session in bold, every text escaped, and the body
/// cut so the message stays within [`TELEGRAM_MAX_CHARS`] as Telegram counts them (tags do not
/// count, an entity counts as one character).
pub fn telegram_html(n: &Notice) -> String {
    let head = format!("{}: {}", n.session, n.headline);
    let question = question(n);
    let (body, separator) = match (&question, &n.body) {
        (Some(q), _) => (q.as_str(), ": "),
        (None, Some(b)) => (b.as_str(), "\n\n"),
        (None, None) => ("", ""),
    };
    let room = TELEGRAM_MAX_CHARS.saturating_sub(head.chars().count() + separator.chars().count());
    let body = cut_chars(body, room);
    format!(
        "<b>{}</b>: {}{separator}{}",
        escape_html(&n.session),
        escape_html(&n.headline),
        escape_html(&body)
    )
}

fn escape_html(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}


#[cfg(test)]
mod tests {
    use super::*;
    use crate::channels::notice::tests::stop;

    #[test]
    fn telegram_html_escapes_and_stays_within_4096_characters() {
        assert_eq!(
            telegram_html(&stop("if a < b && c > d")),
            "<b>s1</b>: agent finished\n\nif a &lt; b &amp;&amp; c &gt; d"
        );
        let long = telegram_html(&stop(&"<é".repeat(5000)));
        let visible = long
            .replace("<b>", "")
            .replace("</b>", "")
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&amp;", "&");
        assert_eq!(visible.chars().count(), TELEGRAM_MAX_CHARS);
        assert!(long.ends_with('…'));
    }
}
