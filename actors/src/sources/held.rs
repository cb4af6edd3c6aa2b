//! [`Held`]: a [`HeldSource`] run as a [`Source`]. Each fetch reads what the open connection
//! received next (opening it first, from the stored resume token, when there is none); what
//! a batch asks to acknowledge is acknowledged only once the batch is committed, before the
//! next read; a failure drops the connection.

use std::sync::{Arc, Mutex};

use relayq_engine::approvals::Answered;
use relayq_engine::InboundMessage;

use super::contract::{Arrived, Batch, Fetch, HeldConnection, HeldSource, Source};
use crate::kit::ReadyCheck;
use crate::pacing::Budgets;

pub struct Held<S: HeldSource> {
    source: S,
    /// The open connection, between fetches.
    open: Arc<Mutex<Option<S::Connection>>>,
    /// Acknowledgements of the batch handed over, not yet committed.
    awaiting: Arc<Mutex<Vec<String>>>,
    /// Acknowledgements of committed batches, sent before the next read.
    due: Arc<Mutex<Vec<String>>>,
}

/// A clone shares the connection and what awaits acknowledgement.
impl<S: HeldSource> Clone for Held<S> {
    fn clone(&self) -> Self {
        Held {
            source: self.source.clone(),
            open: self.open.clone(),
            awaiting: self.awaiting.clone(),
            due: self.due.clone(),
        }
    }
}

impl<S: HeldSource> Held<S> {
    pub fn new(source: S) -> Self {
        Held {
            source,
            open: Arc::default(),
            awaiting: Arc::default(),
            due: Arc::default(),
        }
    }
}

impl<S: HeldSource> Source for Held<S> {
    fn named(&mut self, name: &str) {
        self.source.named(name);
    }

    fn fetch(&mut self, offset: Option<String>) -> Fetch {
        let (source, open) = (self.source.clone(), self.open.clone());
        let (awaiting, due) = (self.awaiting.clone(), self.due.clone());
        Box::pin(async move {
            let held = open.lock().unwrap().take();
            let mut connection = match held {
                Some(connection) => connection,
                None => source.connect(offset.clone()).await?,
            };
            let acks = std::mem::take(&mut *due.lock().unwrap());
            if !acks.is_empty() {
                connection.acknowledge(acks).await?;
            }
            let Arrived {
                messages,
                answers,
                requests,
                resume,
                acks,
            } = connection.next().await?;
            if messages.is_empty() && answers.is_empty() && requests.is_empty() {
                // Nothing to commit: acknowledged at once.
                if !acks.is_empty() {
                    connection.acknowledge(acks).await?;
                }
            } else {
                *awaiting.lock().unwrap() = acks;
            }
            *open.lock().unwrap() = Some(connection);
            Ok(Batch {
                messages,
                answers,
                requests,
                offset: resume.or(offset).unwrap_or_default(),
            })
        })
    }

    fn committed(&mut self, _new: Vec<InboundMessage>, _budget: Option<Arc<dyn Budgets>>) {}

    fn acknowledge(&mut self, answered: Vec<Answered>) {
        self.source.acknowledge(answered);
    }

    fn tapped(&mut self, taps: Vec<(String, String)>) {
        self.source.tapped(taps);
    }

    fn taken(&mut self) {
        let committed = std::mem::take(&mut *self.awaiting.lock().unwrap());
        self.due.lock().unwrap().extend(committed);
    }

    fn reset(&mut self) {
        // What was not committed is not acknowledged: the platform sends it again on the
        // next connection.
        self.open.lock().unwrap().take();
        self.awaiting.lock().unwrap().clear();
    }

    fn ready_check(&self) -> Option<ReadyCheck> {
        self.source.ready_check()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::contract::OnConnection;

    /// A platform that sends `queue` in order, again from the first unacknowledged one on each
    /// new connection (as Slack does), and records acknowledgements.
    #[derive(Clone, Default)]
    struct Platform {
        queue: Arc<Mutex<Vec<(String, bool)>>>,
        connects: Arc<Mutex<Vec<Option<String>>>>,
    }

    struct Open {
        platform: Platform,
        sent: usize,
    }

    impl HeldConnection for Open {
        fn next(&mut self) -> OnConnection<'_, Arrived> {
            Box::pin(async move {
                let queue = self.platform.queue.lock().unwrap();
                let Some((id, _)) = queue.iter().skip(self.sent).find(|(_, acked)| !acked) else {
                    return Err("nothing more".into());
                };
                self.sent = queue.iter().position(|(i, _)| i == id).unwrap() + 1;
                Ok(Arrived {
                    messages: vec![InboundMessage::text("s", "held", id)],
                    answers: Vec::new(),
                    requests: Vec::new(),
                    resume: Some(format!("after-{id}")),
                    acks: vec![id.clone()],
                })
            })
        }

        fn acknowledge(&mut self, acks: Vec<String>) -> OnConnection<'_, ()> {
            let mut queue = self.platform.queue.lock().unwrap();
            for (id, acked) in queue.iter_mut() {
                *acked |= acks.contains(id);
            }
            Box::pin(async { Ok(()) })
        }
    }

    impl HeldSource for Platform {
        type Connection = Open;

        fn connect(&self, resume: Option<String>) -> OnConnection<'static, Open> {
            self.connects.lock().unwrap().push(resume);
            let platform = self.clone();
            Box::pin(async move { Ok(Open { platform, sent: 0 }) })
        }
    }

    fn acked(platform: &Platform) -> Vec<bool> {
        platform
            .queue
            .lock()
            .unwrap()
            .iter()
            .map(|(_, a)| *a)
            .collect()
    }

    #[actix_rt::test]
    async fn a_batch_is_acknowledged_only_once_committed_and_a_failure_reconnects_from_the_stored_token(
    ) {
        let platform = Platform::default();
        *platform.queue.lock().unwrap() = ["a", "b", "c"].map(|i| (i.to_string(), false)).to_vec();
        let mut held = Held::new(platform.clone());

        let a = held.fetch(None).await.unwrap();
        assert_eq!(
            (a.messages[0].content.as_str(), a.offset.as_str()),
            ("a", "after-a")
        );
        assert_eq!(
            acked(&platform),
            [false, false, false],
            "not before the commit"
        );
        held.taken();
        let b = held.fetch(Some(a.offset)).await.unwrap();
        assert_eq!(
            acked(&platform),
            [true, false, false],
            "a, once committed, before reading b"
        );
        assert_eq!(b.messages[0].content, "b");

        // b's commit fails: the connection is dropped and b never acknowledged.
        held.reset();
        let again = held.fetch(Some("after-a".into())).await.unwrap();
        assert_eq!(again.messages[0].content, "b", "the platform sends b again");
        assert_eq!(
            *platform.connects.lock().unwrap(),
            [None, Some("after-a".to_string())],
            "reconnected from the stored token"
        );
        held.taken();
        held.fetch(Some(again.offset)).await.unwrap();
        assert_eq!(acked(&platform), [true, true, false]);
    }
}
