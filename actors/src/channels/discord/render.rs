//! Notices in Discord markdown.

use relayq_engine::Notice;

use crate::channels::notice::question;
use crate::kit::cut_chars;

/// Discord's limit on a message's content, in characters.
pub const DISCORD_MAX_CHARS: usize = 2000;

/// Discord markdown: the session in bold (its markdown characters escaped), the agent's text as
/// written but unable to ping everyone, cut to [`DISCORD_MAX_CHARS`].
pub fn discord_markdown(n: &Notice) -> String {
    let head = format!(
        "**{}**: {}",
        escape_markdown(&n.session),
        escape_markdown(&n.headline)
    );
    let text = match (&question(n), &n.body) {
        (Some(q), _) => format!("{head}: {q}"),
        (None, Some(b)) => format!("{head}\n\n{b}"),
        (None, None) => head,
    };
    // A zero-width space after the @ keeps the text and drops the mass mention.
    let text = text
        .replace("@everyone", "@\u{200b}everyone")
        .replace("@here", "@\u{200b}here");
    cut_chars(&text, DISCORD_MAX_CHARS)
}

fn escape_markdown(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(
            c,
            '\\' | '*' | '_' | '~' | '`' | '|' | '>' | '#' | '[' | ']'
        ) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}


#[cfg(test)]
mod tests {
    use super::*;
    use crate::channels::notice::tests::stop;

    #[test]
    fn discord_markup_cannot_mention_everyone_or_break_the_bold() {
        let n = Notice {
            session: "my_*sess*".into(),
            ..stop("see <!channel> & @everyone")
        };
        let d = discord_markdown(&n);
        assert!(d.starts_with("**my\\_\\*sess\\***: agent finished"), "{d}");
        assert!(
            !d.contains("@everyone") && d.contains("@\u{200b}everyone"),
            "{d}"
        );
        assert_eq!(
            discord_markdown(&stop(&"x".repeat(5000))).chars().count(),
            DISCORD_MAX_CHARS
        );
    }
}
