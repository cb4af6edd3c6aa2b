//! The names a chat may give: a project's and a session's. Both reach tmux and the file
//! system as their own arguments, never through a shell, and are still held to a narrow set
//! so no tmux target parser, path or terminal reads anything into them.

/// The most characters a name has.
pub const MAX_NAME_CHARS: usize = 64;

/// A project's name (`[projects.NAME]`): 1–64 characters of `A–Z a–z 0–9 . _ -`, starting
/// with a letter or digit (never read as an option), without `..`.
pub fn check_project_name(name: &str) -> Result<String, String> {
    check(name, "project name", true)
}

/// A session's name, which is its relayq session key and its tmux session's name: as a
/// project's, but without `.`, which tmux turns into `_` in a session's name (so `a.b` and
/// `a_b` would be one pane).
pub fn check_session_name(name: &str) -> Result<String, String> {
    check(name, "session name", false)
}

fn check(name: &str, what: &str, dots: bool) -> Result<String, String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-' || (dots && c == '.');
    let rule = match dots {
        true => "1 to 64 of A-Z a-z 0-9 . _ -, starting with a letter or digit, without ..",
        false => "1 to 64 of A-Z a-z 0-9 _ -, starting with a letter or digit",
    };
    let count = name.chars().count();
    let fault = if count == 0 {
        Some("is empty".to_string())
    } else if count > MAX_NAME_CHARS {
        Some(format!("has {count} characters"))
    } else if let Some(c) = name.chars().find(|c| !allowed(*c)) {
        Some(match c.is_control() || c.is_whitespace() {
            true => format!("has the character U+{:04X}", c as u32),
            false => format!("has the character {c:?}"),
        })
    } else if !name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        Some("does not start with a letter or digit".into())
    } else if name.contains("..") {
        Some("has ..".into())
    } else {
        None
    };
    match fault {
        None => Ok(name.to_string()),
        Some(fault) => Err(format!("the {what} {:?} {fault}: use {rule}", shown(name))),
    }
}

/// A word as the chat may be shown it: control characters escaped, at most 64 characters.
pub fn shown(word: &str) -> String {
    let cut: String = word.chars().take(64).collect();
    let cut = cut.escape_debug().to_string();
    match word.chars().count() > 64 {
        true => format!("{cut}…"),
        false => cut,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_a_narrow_set_and_the_refusal_says_which_character() {
        assert_eq!(check_project_name("web.app-2").unwrap(), "web.app-2");
        assert_eq!(check_session_name("fix_1-B").unwrap(), "fix_1-B");
        assert!(check_session_name("a.b").unwrap_err().contains("'.'"));
        assert!(check_project_name("a..b").unwrap_err().contains("has .."));
        assert!(check_project_name("-rf")
            .unwrap_err()
            .contains("start with"));
        assert!(check_session_name("a b").unwrap_err().contains("U+0020"));
        assert!(check_session_name("a\0b").unwrap_err().contains("U+0000"));
        assert!(check_session_name(&"x".repeat(65))
            .unwrap_err()
            .contains("65 characters"));
        assert!(check_session_name(&"x".repeat(64)).is_ok());
        assert!(check_session_name("").unwrap_err().contains("is empty"));
    }
}
