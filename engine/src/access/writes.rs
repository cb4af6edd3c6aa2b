//! The access writes the operator makes: approve a pairing code, remove a person.

use super::pairing::{approve_in, Approved, Approver};
use super::Role;
use crate::error::Result;
use crate::storage::access as store;
use crate::writes::{Write, Writer};

/// `relayq users approve CODE`: the operator adds the person who was given `code`.
#[derive(Debug, Clone)]
pub struct ApprovePairing {
    pub code: String,
    pub role: Role,
    /// Who ran it (the operator's user name).
    pub by: String,
}

impl Write for ApprovePairing {
    type Output = Approved;

    fn apply(&self, w: &Writer<'_>) -> Result<Approved> {
        approve_in(
            w,
            &self.code,
            self.role,
            &Approver::Operator(self.by.clone()),
        )
    }
}

/// A platform's pushed messages, before they are enqueued: those whose senders may write (see
/// [`admit_in`](super::admit_in)); a stranger's chat told once an hour.
#[derive(Debug, Clone)]
pub struct AdmitMessages(pub Vec<crate::InboundMessage>);

impl Write for AdmitMessages {
    type Output = super::Admitted;

    fn apply(&self, w: &Writer<'_>) -> Result<super::Admitted> {
        super::admit_in(w, &self.0)
    }
}

/// `relayq users remove ORIGIN USER`: whether there was such a person.
#[derive(Debug, Clone)]
pub struct RemoveChatUser {
    pub origin: String,
    pub user_id: String,
}

impl Write for RemoveChatUser {
    type Output = bool;

    fn apply(&self, w: &Writer<'_>) -> Result<bool> {
        let removed = store::remove_user_in(w.tx(), &self.origin, &self.user_id)?;
        if removed {
            tracing::info!(
                origin = self.origin,
                user = self.user_id,
                "a person removed"
            );
        }
        Ok(removed)
    }
}
