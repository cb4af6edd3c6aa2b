//! The launcher: carries out the session commands (`/new`, `/stop`, `/resume`) that chats
//! gave for the projects this node hosts.

/// Look for this node's ready session commands now (a batch just made one ready).
#[derive(Debug, Clone, Copy, actix::Message)]
#[rtype(result = "()")]
pub struct LookForCommands;
