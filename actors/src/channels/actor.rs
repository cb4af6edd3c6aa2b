//! The one actor that runs any [`Channel`]: a platform is settings, a client and a
//! classification, never actix code of its own.

use actix::prelude::*;
use tracing::Instrument;

use super::contract::{Answer, Channel, Content, Delivery, Outcome};

/// Ask a channel to deliver one row. `1` is the span the row's delivery runs in (row,
/// channel, attempt), so the channel's own log lines about it say which row they are about.
#[derive(Debug, Clone, actix::Message)]
#[rtype(result = "Outcome")]
pub struct Deliver(pub Delivery, pub tracing::Span);

/// Runs channel `C`: one delivery per [`Deliver`] message, answered when the channel's answer
/// is known. An answer that comes later does not hold up the next message.
pub struct ChannelActor<C: Channel> {
    channel: C,
}

impl<C: Channel> ChannelActor<C> {
    pub fn new(channel: C) -> Self {
        ChannelActor { channel }
    }
}

impl<C: Channel> Actor for ChannelActor<C> {
    type Context = Context<Self>;
}

impl<C: Channel> Handler<Deliver> for ChannelActor<C> {
    type Result = actix::Response<Outcome>;

    fn handle(
        &mut self,
        Deliver(mut delivery, span): Deliver,
        _: &mut Context<Self>,
    ) -> Self::Result {
        // A notice is stored as data; this channel writes it in its own markup.
        if let Content::Outbound(message) = &mut delivery.content {
            if let (true, Some(notice)) = (message.text.is_empty(), &message.notice) {
                message.text = self.channel.render(notice);
                if let Some(limit) = self.channel.text_limit() {
                    // Platform renderers fit their limit; plain text is cut here.
                    message.text = super::notice::fit(&message.text, limit);
                }
            }
        }
        match span.in_scope(|| self.channel.deliver(delivery)) {
            Answer::Now(outcome) => actix::Response::reply(outcome),
            Answer::Later(future) => actix::Response::fut(future.instrument(span)),
        }
    }
}
