//! A hook event's [`Notice`] rendered for each kind of far end. The engine keeps notices as
//! data; a channel turns one into text with [`Channel::render`](crate::channels::Channel::render),
//! which is [`plain`] unless the platform has markup of its own.

use relayq_engine::{EventType, Notice};

/// Telegram's limit on a message's text, in characters after entities are parsed.
pub const TELEGRAM_MAX_CHARS: usize = 4096;

/// Discord's limit on a message's content, in characters.
pub const DISCORD_MAX_CHARS: usize = 2000;

/// Plain text, as relayq has always written notices: `s1: agent finished\n\nAll pass.`,
/// `s1 needs you: May I run Bash?`, `s1: error: rate_limit (429)`. For files, commands and
/// webhooks, which also get the notice itself as JSON.
pub fn plain(n: &Notice) -> String {
    let (s, headline) = (&n.session, &n.headline);
    match (&question(n), &n.body) {
        (Some(q), _) => format!("{s} {headline}: {q}"),
        (None, Some(b)) if n.event == EventType::Error => format!("{s}: {headline}: {b}"),
        (None, Some(b)) => format!("{s}: {headline}\n\n{b}"),
        (None, None) => format!("{s}: {headline}"),
    }
}

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

/// Slack mrkdwn: the session in bold; `&`, `<` and `>` escaped as Slack asks (so text cannot
/// form a link or a mention); the agent's own text is left as written.
pub fn slack_mrkdwn(n: &Notice) -> String {
    let escape = |t: &str| {
        t.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    };
    let head = format!("*{}*: {}", escape(&n.session), escape(&n.headline));
    match (&question(n), &n.body) {
        (Some(q), _) => format!("{head}: {}", escape(q)),
        (None, Some(b)) => format!("{head}\n\n{}", escape(b)),
        (None, None) => head,
    }
}

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

/// The notice's question, and how to answer it when it opened an approval (the text commands,
/// which every channel takes; Telegram and Slack add buttons).
fn question(n: &Notice) -> Option<String> {
    let question = n.question.clone()?;
    Some(match &n.approval {
        Some(approval) => format!("{question}\n{}", approval.text_commands()),
        None => question,
    })
}

fn escape_html(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
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

/// At most `max` characters of `text`; when cut, the last one is `…`.
/// A rendered notice within `limit`: plain text longer than it is cut, with `…` at the end
/// (a notice is one message; the whole answer stays in the agent's transcript). Markup is the
/// renderer's to fit.
pub fn fit(text: &str, limit: relayq_engine::TextLimit) -> String {
    use relayq_engine::chunking::length;
    if limit.markup != relayq_engine::Markup::Plain || length(text) <= limit.max {
        return text.to_string();
    }
    let (mut cut, mut units) = (String::new(), 0);
    for c in text.chars() {
        units += c.len_utf16();
        if units + 1 > limit.max {
            break;
        }
        cut.push(c);
    }
    cut.push('…');
    cut
}

/// At most `max` characters of `text`; when cut, the last one is `…`.
pub fn cut_chars(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notice(
        event: EventType,
        headline: &str,
        body: Option<&str>,
        question: Option<&str>,
    ) -> Notice {
        Notice {
            session: "s1".into(),
            event,
            headline: headline.into(),
            body: body.map(str::to_string),
            question: question.map(str::to_string),
            approval: None,
        }
    }

    fn stop(body: &str) -> Notice {
        notice(EventType::AgentStop, "agent finished", Some(body), None)
    }

    #[test]
    fn a_plain_notice_over_the_channel_limit_is_cut_with_an_ellipsis_and_markup_is_left_alone() {
        let text = plain(&stop(&"word ".repeat(40)));
        let limit = |markup| relayq_engine::TextLimit { max: 64, markup };
        let cut = fit(&text, limit(relayq_engine::Markup::Plain));
        assert_eq!(relayq_engine::chunking::length(&cut), 64);
        assert!(cut.ends_with('…') && text.starts_with(cut.trim_end_matches('…')));
        assert_eq!(fit("short", limit(relayq_engine::Markup::Plain)), "short");
        assert_eq!(
            fit(&text, limit(relayq_engine::Markup::Html)),
            text,
            "the renderer's to fit"
        );
    }

    #[test]
    fn plain_text_is_what_relayq_always_wrote() {
        assert_eq!(plain(&stop("All pass.")), "s1: agent finished\n\nAll pass.");
        let bare = notice(EventType::AgentStop, "agent finished", None, None);
        assert_eq!(plain(&bare), "s1: agent finished");
        let ask = notice(
            EventType::Notification,
            "needs you",
            None,
            Some("May I run Bash?"),
        );
        assert_eq!(plain(&ask), "s1 needs you: May I run Bash?");
        let error = notice(EventType::Error, "error", Some("rate_limit (429)"), None);
        assert_eq!(plain(&error), "s1: error: rate_limit (429)");
    }

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

    #[test]
    fn slack_and_discord_markup_cannot_link_mention_or_break_the_bold() {
        let n = Notice {
            session: "my_*sess*".into(),
            ..stop("see <!channel> & @everyone")
        };
        assert_eq!(
            slack_mrkdwn(&n),
            "*my_*sess**: agent finished\n\nsee &lt;!channel&gt; &amp; @everyone"
        );
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
