//! `relayq session expire S`: the session is gone; its pending messages will never be
//! delivered. A running daemon is woken so the session's worker notices and stops.

use relayq_engine::inbound;

use crate::cli::{CliError, Context};
use crate::commands::open_inbound;

pub fn expire(ctx: &Context, session: &str) -> Result<(), CliError> {
    if session.trim().is_empty() {
        return Err(CliError::Usage(
            "the session id is empty: give the session to expire".into(),
        ));
    }
    let (engine, queue) = open_inbound(ctx)?;
    let n = queue.expire_key(session, "session expired")?;
    relayq_actors::wake::notify(engine.database().path(), inbound::QUEUE, session);
    println!("expired {n} pending message(s) of session {session}");
    Ok(())
}
