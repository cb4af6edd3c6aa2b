//! Notices in Slack mrkdwn.

use relayq_engine::Notice;

use crate::channels::notice::question;

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


#[cfg(test)]
mod tests {
    use super::*;
    use crate::channels::notice::tests::stop;

    #[test]
    fn slack_markup_cannot_link_mention_or_break_the_bold() {
        let n = Notice {
            session: "my_*sess*".into(),
            ..stop("see <!channel> & @everyone")
        };
        assert_eq!(
            slack_mrkdwn(&n),
            "*my_*sess**: agent finished\n\nsee &lt;!channel&gt; &amp; @everyone"
        );
    }
}
