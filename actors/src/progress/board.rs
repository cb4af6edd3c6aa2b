//! A turn's progress message: the agent's steps as they come, folded into one text that is
//! edited as the turn goes on, and its last words when the turn ends.

use std::time::Duration;

use relayq_engine::progress::Step;

/// The most steps a progress message lists (the earlier ones are counted).
const SHOWN_STEPS: usize = 8;
/// The most of the answer so far a progress message shows (its end), and keeps.
const SHOWN_ANSWER: usize = 1500;
const KEPT_ANSWER: usize = 4000;

/// One turn's progress, as its message should read.
#[derive(Debug, Clone)]
pub struct Board {
    pub session: String,
    /// When the turn began (unix ms; the first event seen, when its start was not).
    pub started_at: i64,
    /// The steps, oldest first: a tool and what it works on, and whether it finished.
    steps: Vec<Line>,
    /// Steps left out of `steps` (the oldest).
    earlier: usize,
    /// The answer so far, where the chat streams it (its end only).
    answer: String,
    /// The turn ended: with an answer, or not.
    pub ended: Option<bool>,
    /// Changed since the text last sent.
    pub version: u64,
}

#[derive(Debug, Clone)]
struct Line {
    tool: String,
    on: Option<String>,
    state: LineState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LineState {
    Running,
    Done,
    Failed,
}

impl Board {
    pub fn new(session: &str, started_at: i64) -> Board {
        Board {
            session: session.to_string(),
            started_at,
            steps: Vec::new(),
            earlier: 0,
            answer: String::new(),
            ended: None,
            version: 1,
        }
    }

    /// Whether the turn has a step or some of its answer to show yet.
    pub fn has_content(&self) -> bool {
        !self.steps.is_empty() || self.earlier > 0 || !self.answer.trim().is_empty()
    }

    /// Folds `step` in; whether the text changed.
    pub fn fold(&mut self, step: &Step) -> bool {
        match step {
            Step::TurnStarted => return false,
            Step::Tool { name, on } => {
                self.steps.push(Line {
                    tool: name.clone(),
                    on: on.clone(),
                    state: LineState::Running,
                });
                if self.steps.len() > SHOWN_STEPS {
                    self.steps.remove(0);
                    self.earlier += 1;
                }
            }
            Step::ToolDone { name, failed } => {
                let running = self
                    .steps
                    .iter_mut()
                    .rev()
                    .find(|l| l.state == LineState::Running && &l.tool == name);
                let Some(line) = running else {
                    return false;
                };
                line.state = match failed {
                    true => LineState::Failed,
                    false => LineState::Done,
                };
            }
            Step::TurnEnded { answered } => self.ended = Some(*answered),
            Step::Text { more } => {
                self.answer.push_str(more);
                if self.answer.chars().count() > KEPT_ANSWER {
                    self.answer = tail(&self.answer, KEPT_ANSWER);
                }
            }
        }
        self.version += 1;
        true
    }

    /// The message's text at `now` (unix ms): the session, how long the turn has run (or took),
    /// its steps, and at the end where the answer is.
    pub fn text(&self, now: i64) -> String {
        let took = clock(Duration::from_millis((now - self.started_at).max(0) as u64));
        let head = match self.ended {
            None => format!("⏳ {} is working · {took}", self.session),
            Some(true) => format!(
                "✔ {} answered after {took} · the answer is below",
                self.session
            ),
            Some(false) => format!("✖ {} stopped after {took} without an answer", self.session),
        };
        let mut lines = vec![head];
        if self.earlier > 0 {
            lines.push(format!("… {} earlier step(s)", self.earlier));
        }
        for l in &self.steps {
            let mark = match l.state {
                LineState::Running if self.ended.is_none() => "▸",
                LineState::Running | LineState::Done => "•",
                LineState::Failed => "✖",
            };
            match &l.on {
                Some(on) => lines.push(format!("{mark} {} {on}", l.tool)),
                None => lines.push(format!("{mark} {}", l.tool)),
            }
        }
        // The answer as it grows, while the turn runs (then it is the answer's own message).
        if self.ended.is_none() && !self.answer.trim().is_empty() {
            let shown = tail(self.answer.trim_end(), SHOWN_ANSWER);
            let cut = match shown.len() < self.answer.trim_end().len() {
                true => "…",
                false => "",
            };
            lines.push(String::new());
            lines.push(format!("{cut}{shown}"));
        }
        lines.join("\n")
    }
}

/// The last `max` characters of `text`.
fn tail(text: &str, max: usize) -> String {
    let n = text.chars().count();
    text.chars().skip(n.saturating_sub(max)).collect()
}

/// `m:ss`, or `h:mm:ss` past an hour.
fn clock(took: Duration) -> String {
    let s = took.as_secs();
    match s / 3600 {
        0 => format!("{}:{:02}", s / 60, s % 60),
        h => format!("{h}:{:02}:{:02}", (s / 60) % 60, s % 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_board_lists_the_recent_steps_marks_the_running_one_and_ends_pointing_at_the_answer() {
        let mut board = Board::new("demo", 0);
        let tool = |name: &str, on: &str| Step::Tool {
            name: name.into(),
            on: Some(on.into()),
        };
        assert!(board.fold(&tool("Bash", "cargo build")));
        assert!(board.fold(&Step::ToolDone {
            name: "Bash".into(),
            failed: false
        }));
        board.fold(&tool("Read", "src/main.rs"));
        assert_eq!(
            board.text(65_000),
            "⏳ demo is working · 1:05\n• Bash cargo build\n▸ Read src/main.rs"
        );
        for n in 0..10 {
            board.fold(&tool("Grep", &format!("p{n}")));
        }
        assert!(
            board.text(0).contains("… 4 earlier step(s)"),
            "{}",
            board.text(0)
        );
        board.fold(&Step::TurnEnded { answered: true });
        let end = board.text(3_725_000);
        assert!(
            end.starts_with("✔ demo answered after 1:02:05 · the answer is below"),
            "{end}"
        );
        assert!(!end.contains('▸'), "nothing runs after the turn: {end}");
    }

    #[test]
    fn a_streamed_answer_shows_its_end_while_the_turn_runs_and_goes_when_it_ends() {
        let mut board = Board::new("demo", 0);
        assert!(!board.has_content());
        board.fold(&Step::Text {
            more: "first line\n".into(),
        });
        assert!(board.has_content());
        assert!(
            board.text(0).ends_with("\n\nfirst line"),
            "{}",
            board.text(0)
        );
        board.fold(&Step::Text {
            more: "x".repeat(2 * SHOWN_ANSWER),
        });
        let shown = board.text(0);
        assert!(shown.contains("\n\n…x"), "cut at its start: {shown}");
        assert!(!shown.contains("first line"));
        board.fold(&Step::TurnEnded { answered: true });
        assert!(
            !board.text(0).contains('x'),
            "the answer is its own message now"
        );
    }
}
