//! A hook event's [`Notice`] as plain text, and what every renderer shares (the question with
//! its text commands, fitting a limit). The engine keeps notices as data; a channel turns one
//! into text with [`Channel::render`](crate::channels::Channel::render), which is [`plain`]
//! unless the platform has markup of its own: each platform's renderer is in its folder
//! (`telegram/render.rs`, `slack/render.rs`, `discord/render.rs`).

use relayq_engine::{EventType, Notice};

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

/// The notice's question, and how to answer it when it opened an approval (the text commands,
/// which every channel takes; Telegram and Slack add buttons).
pub fn question(n: &Notice) -> Option<String> {
    let question = n.question.clone()?;
    Some(match &n.approval {
        Some(approval) => format!("{question}\n{}", approval.text_commands()),
        None => question,
    })
}

/// At most `max` characters of `text`; when cut, the last one is `…`.
/// A rendered notice within `limit`: plain text longer than it is cut, with `…` at the end
/// (a notice is one message; the whole answer stays in the agent's transcript). Markup is the
/// renderer's to fit.
pub fn fit(text: &str, limit: relayq_engine::TextLimit) -> String {
    use relayq_engine::outbound::chunking::length;
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn notice(
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

    pub(crate) fn stop(body: &str) -> Notice {
        notice(EventType::AgentStop, "agent finished", Some(body), None)
    }

    #[test]
    fn a_plain_notice_over_the_channel_limit_is_cut_with_an_ellipsis_and_markup_is_left_alone() {
        let text = plain(&stop(&"word ".repeat(40)));
        let limit = |markup| relayq_engine::TextLimit { max: 64, markup };
        let cut = fit(&text, limit(relayq_engine::Markup::Plain));
        assert_eq!(relayq_engine::outbound::chunking::length(&cut), 64);
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
}
