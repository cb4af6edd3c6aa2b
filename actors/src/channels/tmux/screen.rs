//! What an agent's pane shows, read from `tmux capture-pane`: whether a dialog is open (a
//! permission prompt, whose highlighted default Enter would confirm), and whether a pasted
//! text still sits in the input box (the agent took an Enter as a newline, or the Enter was
//! lost). Only a safety check beside the agent's own events, never the source of a state.
//!
//! The three agent CLIs draw the input box at the bottom, starting with a prompt marker (`❯`
//! Claude Code, `›` Codex, `>` Gemini CLI); the conversation above may repeat the marker, so
//! the input box is taken from the bottom-most marker line down.

/// Words that only a dialog shows, per agent (observed with Claude Code 2.1, Codex 0.171,
/// Gemini CLI 0.61): its question, and the choices' wording.
const DIALOG_MARKERS: &[&str] = &[
    "Do you want to proceed?",
    "Do you want to make this edit",
    "Do you want to create",
    "Would you like to run the following command?",
    "Would you like to make the following edits?",
    "Allow execution",
    "Apply this change?",
    "Hooks need review",
    "Yes, allow once",
    "Yes, and don't ask again",
];

/// How far up from the bottom a dialog is looked for: the CLIs draw it in place of the input
/// box, while the conversation above may quote a dialog's words.
const DIALOG_LINES: usize = 10;

/// The first character of an input box's first line, per agent.
const PROMPT_MARKERS: &[char] = &['❯', '›', '>'];

/// What an agent shows while a turn runs (Claude Code and Codex: `esc to interrupt`; Gemini
/// CLI: `esc to cancel`), lowercased.
const BUSY_MARKERS: &[&str] = &["esc to interrupt", "esc to cancel"];

/// What an empty input box shows, per agent (Claude Code shows nothing after its marker).
const PLACEHOLDERS: &[&str] = &["Type your message", "Ask Codex to do anything"];

/// How Claude Code (and Gemini CLI) show a long paste in the input box, lowercased.
const PASTE_PLACEHOLDER: &str = "[pasted text";

/// A pane's screen as `capture-pane -p -J` gives it.
pub struct Screen {
    lines: Vec<String>,
    /// The cursor's column, when known: at 0, a line just submitted left no input behind.
    cursor_x: Option<usize>,
}

impl Screen {
    pub fn new(captured: &str) -> Self {
        Screen {
            lines: captured.lines().map(|l| l.trim_end().to_string()).collect(),
            cursor_x: None,
        }
    }

    pub fn with_cursor_x(self, cursor_x: Option<usize>) -> Self {
        Screen { cursor_x, ..self }
    }

    /// The dialog wording at the bottom of the screen, if a dialog is open.
    pub fn dialog(&self) -> Option<&'static str> {
        DIALOG_MARKERS
            .iter()
            .find(|marker| self.bottom(DIALOG_LINES).any(|l| l.contains(*marker)))
            .copied()
    }

    /// The open dialog's lines, cleaned of box drawing: from the top of the box around its
    /// wording (Gemini CLI frames its dialog) down to the bottom of the screen. `None` when no
    /// dialog is open.
    fn dialog_block(&self) -> Option<Vec<String>> {
        let marker = self.dialog()?;
        let at = self.lines.iter().rposition(|l| l.contains(marker))?;
        let top = (0..=at)
            .rev()
            .take(DIALOG_BLOCK_LINES)
            .find(|&i| self.lines[i].trim_start().starts_with('╭'))
            .unwrap_or(at.saturating_sub(DIALOG_BLOCK_LINES / 2));
        Some(
            self.lines[top..]
                .iter()
                .map(|l| unboxed(l))
                .filter(|l| !l.is_empty())
                .collect(),
        )
    }

    /// Whether the open dialog asks about `action` (what its approval says the tool will do):
    /// the beginning of the action's first line shows in it. Keys go only to that dialog,
    /// never to another question's.
    pub fn dialog_about(&self, action: &str) -> bool {
        let Some(block) = self.dialog_block() else {
            return false;
        };
        let first_line = words(action.lines().find(|l| !l.trim().is_empty()).unwrap_or(""));
        let start: String = first_line.chars().take(ACTION_SHOWN_CHARS).collect();
        !start.trim().is_empty() && block.join(" ").contains(start.trim())
    }

    /// The key of the open dialog's choice whose label starts with one of `labels` (`1` for
    /// "1. Allow once"), as the dialog numbers it now.
    pub fn choice(&self, labels: &[&str]) -> Option<String> {
        self.dialog_block()?.iter().find_map(|line| {
            let line = line.trim_start_matches(['●', '❯', '>', ' ']);
            let (number, label) = line.split_once(". ")?;
            let numbered = !number.is_empty() && number.chars().all(|c| c.is_ascii_digit());
            (numbered && labels.iter().any(|l| label.starts_with(l))).then(|| number.to_string())
        })
    }

    /// The index of the bottom-most line that starts with a prompt marker: the input box's.
    fn marker_line(&self) -> Option<usize> {
        self.lines.iter().rposition(|l| {
            l.trim_start()
                .chars()
                .next()
                .is_some_and(|c| PROMPT_MARKERS.contains(&c))
        })
    }

    /// The input box: from the bottom-most line that starts with a prompt marker to the end;
    /// on a screen with no marker (a plain program reading lines), the last line with text,
    /// unless the cursor is at the start of a line (what was typed was submitted).
    fn input_box(&self) -> Option<String> {
        let start = match self.marker_line() {
            Some(start) => start,
            None if self.cursor_x == Some(0) => return None,
            None => self.lines.iter().rposition(|l| !l.trim().is_empty())?,
        };
        Some(words(&self.lines[start..].join(" ")))
    }

    /// Whether the bottom of the screen says a turn runs.
    pub fn busy(&self) -> bool {
        self.bottom(DIALOG_LINES).any(|l| {
            let l = l.to_lowercase();
            BUSY_MARKERS.iter().any(|m| l.contains(m))
        })
    }

    /// The last `n` lines with text, bottom first.
    fn bottom(&self, n: usize) -> impl Iterator<Item = &String> {
        self.lines
            .iter()
            .filter(|l| !l.trim().is_empty())
            .rev()
            .take(n)
    }

    /// Whether the agent shows its empty input box at the bottom, no dialog, and no turn
    /// running: it is at its prompt. A dialog answered in the terminal, or a turn whose end
    /// was never reported, says so to no hook, so this is how relayq sees the agent back.
    pub fn at_prompt(&self) -> bool {
        if self.dialog().is_some() || self.busy() {
            return false;
        }
        // The box's first line: what follows it may be the box's border or a status line.
        let Some(first) = self.marker_line() else {
            return false;
        };
        let typed = self.lines[first]
            .trim_start()
            .trim_start_matches(|c: char| PROMPT_MARKERS.contains(&c))
            .trim();
        typed.is_empty() || PLACEHOLDERS.iter().any(|p| typed.starts_with(p))
    }

    /// Whether `text` (as pasted) still sits in the input box: its last words show there, or
    /// the agent's placeholder for a long paste does.
    pub fn holds(&self, text: &str) -> bool {
        let Some(input) = self.input_box() else {
            return false;
        };
        if input.to_lowercase().contains(PASTE_PLACEHOLDER) {
            return true;
        }
        let last_line = text
            .lines()
            .rev()
            .map(words)
            .find(|l| !l.is_empty())
            .unwrap_or_default();
        // The end of the last line: what a narrow box still shows of a long line.
        let tail: String = {
            let chars: Vec<char> = last_line.chars().collect();
            chars[chars.len().saturating_sub(24)..].iter().collect()
        };
        !tail.trim().is_empty() && input.contains(tail.trim())
    }
}

/// How far above a dialog's wording its box's top is looked for.
const DIALOG_BLOCK_LINES: usize = 40;

/// How much of an action's first line must show in a dialog for keys to go to it: enough to
/// tell two commands apart, short enough not to wrap in a narrow pane.
const ACTION_SHOWN_CHARS: usize = 30;

/// A screen line without its box drawing (`│ ╭ ─`), white space folded.
fn unboxed(line: &str) -> String {
    let kept: String = line
        .chars()
        .map(|c| match c {
            '\u{2500}'..='\u{257f}' => ' ',
            c => c,
        })
        .collect();
    words(&kept)
}

/// `s` with every run of white space one space.
fn words(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLAUDE_IDLE: &str = "❯ please reply xyz\n\n● echo: please reply xyz\n\n\
        ──────────\n❯ \n──────────\n  ? for shortcuts";
    const CLAUDE_DIALOG: &str = "❯ please reply abc\n\n● Bash(touch probe.txt)\n\
        ──────────\n Bash command\n\n   touch probe.txt\n\n Do you want to proceed?\n ❯ 1. Yes\n   2. No";
    const GEMINI_HELD: &str = " > please reply g1\n✦ echo: please reply g1\n\
        ──────────\n >   please reply g2\n\n workspace (/directory)";

    /// Gemini CLI 0.61's dialog as `capture-pane -p -J` shows it, an earlier call above.
    const GEMINI_DIALOG: &str = "\
╭──────────────────────────────────────────╮
│ ✓  Shell echo ran >> probe-a1.txt        │
╰──────────────────────────────────────────╯
✦ tool done
 > use the tool a2
╭──────────────────────────────────────────────╮
│ ? Shell  echo ran >> probe-a2.txt            │
│ ╭──────────────────────────────────────────╮ │
│ │ echo ran >> probe-a2.txt                 │ │
│ ╰──────────────────────────────────────────╯ │
│ Allow execution of [Shell]?                  │
│ Redirection detected. To auto-accept, press  │
│                                              │
│ ● 1. Allow once                              │
│   2. Allow for this session                  │
│   3. No, suggest changes (esc)               │
╰──────────────────────────────────────────────╯";

    #[test]
    fn keys_go_only_to_the_dialog_about_the_action_and_by_its_numbering() {
        let screen = Screen::new(GEMINI_DIALOG);
        assert!(screen.dialog_about("echo ran >> probe-a2.txt"));
        assert!(
            !screen.dialog_about("echo ran >> probe-a1.txt"),
            "shown above the dialog, not in it"
        );
        assert!(!Screen::new(CLAUDE_IDLE).dialog_about("please reply xyz"));
        assert_eq!(screen.choice(&["Allow once"]).as_deref(), Some("1"));
        assert_eq!(
            screen.choice(&["Allow for this session"]).as_deref(),
            Some("2")
        );
        assert_eq!(screen.choice(&["Modify with external editor"]), None);
    }

    #[test]
    fn a_dialog_is_seen_by_its_wording() {
        assert_eq!(Screen::new(CLAUDE_DIALOG).dialog(), Some("Do you want to proceed?"));
        assert_eq!(Screen::new(CLAUDE_IDLE).dialog(), None);
        let quoted = format!("{CLAUDE_DIALOG}\n{}", "● more of the answer\n".repeat(12));
        assert_eq!(Screen::new(&quoted).dialog(), None, "quoted far above the bottom");
    }

    #[test]
    fn the_agent_is_at_its_prompt_when_its_input_box_is_empty_and_no_dialog_shows() {
        assert!(Screen::new(CLAUDE_IDLE).at_prompt());
        assert!(!Screen::new(CLAUDE_DIALOG).at_prompt());
        assert!(!Screen::new(GEMINI_HELD).at_prompt(), "text waits in the box");
        let gemini = " > hi\n✦ echo: hi\n──────\n >   Type your message or @path/to/file";
        assert!(Screen::new(gemini).at_prompt());
        let codex = "› Ask Codex to do anything\n  gpt-5-codex default";
        assert!(Screen::new(codex).at_prompt());
        let working = "✻ Churning…\n──────\n❯ \n──────\n  esc to interrupt · ← for agents";
        assert!(Screen::new(working).busy() && !Screen::new(working).at_prompt());
        let gemini_working = " ⠼ Thinking (esc to cancel, 1s)\n──────\n >   Type your message";
        assert!(!Screen::new(gemini_working).at_prompt());
    }

    #[test]
    fn a_text_is_held_only_when_it_shows_in_the_bottom_input_box() {
        assert!(
            !Screen::new(CLAUDE_IDLE).holds("please reply xyz"),
            "sent: it shows in the conversation, not in the box"
        );
        assert!(Screen::new(GEMINI_HELD).holds("please reply g2\n"));
        assert!(!Screen::new(GEMINI_HELD).holds("please reply g1"));
        let long = "❯ [Pasted text #1 +12 lines]\n──────────";
        assert!(Screen::new(long).holds("many\nlines"));
        let plain = "message 3\nanswer 3\nmessage 4\n\n";
        assert!(Screen::new(plain).holds("message 4"), "no marker: the last line");
        assert!(!Screen::new(plain).holds("message 3"));
        let submitted = Screen::new(plain).with_cursor_x(Some(0));
        assert!(!submitted.holds("message 4"), "the cursor left the line: submitted");
    }
}
