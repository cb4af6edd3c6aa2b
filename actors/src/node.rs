//! This daemon as a node of its database (see `relayq_engine::nodes`): it joins at
//! start, says it is alive every [`HEARTBEAT`] on a thread of its own (so a busy actor system
//! cannot make it look lost), and leaves when dropped at a clean stop.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use relayq_engine::nodes::HEARTBEAT;
use relayq_engine::writes::nodes::{Heartbeat, JoinNodes, LeaveNodes};
use relayq_engine::{Engine, WriteDoor};

use crate::error::Result;

/// Membership of the database's nodes, held while the daemon runs.
#[derive(Debug)]
pub struct Membership {
    door: WriteDoor,
    stop: Arc<AtomicBool>,
    beating: Option<JoinHandle<()>>,
}

impl Membership {
    /// Joins as the engine's node (the host's daemon lock must be held) and starts the
    /// heartbeat.
    /// `readiness`: what cannot work here, said with each heartbeat.
    pub fn join(engine: Engine, readiness: crate::readiness::Readiness) -> Result<Membership> {
        // Membership writes only the nodes' table: the queues' policies do not matter.
        let door = WriteDoor::new(engine.queues(&Default::default()), Default::default());
        join(&door)?;
        tracing::info!(
            node = engine.node(),
            instance = engine.owner(),
            "joined the nodes"
        );
        let stop = Arc::new(AtomicBool::new(false));
        let beating = {
            let (door, stop) = (door.clone(), stop.clone());
            std::thread::Builder::new()
                .name("relayq-heartbeat".into())
                .spawn(move || beat(&door, &stop, &readiness))
                .map_err(|e| crate::ActorError::Blocking(e.to_string()))?
        };
        Ok(Membership {
            door,
            stop,
            beating: Some(beating),
        })
    }
}

/// Joins the nodes as the door's engine's node, and notes how busy the others are.
fn join(door: &WriteDoor) -> relayq_engine::Result<()> {
    let others = door.apply_now(JoinNodes)?;
    door.engine.note_others(others);
    Ok(())
}

/// Says the node is alive until told to stop; joins again if its name was taken meanwhile
/// (it was thought lost: its leases were taken back, and fencing refuses its late answers).
fn beat(door: &WriteDoor, stop: &AtomicBool, readiness: &crate::readiness::Readiness) {
    let engine = &door.engine;
    let tick = std::time::Duration::from_millis(100);
    let mut since = std::time::Instant::now();
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(tick);
        // A node that becomes busy or idle says so at once; between heartbeats it reads the
        // others' (see `Engine::busier_than_others`). A database one daemon serves has no
        // others to tell.
        let changed = engine.sample_load() && engine.database().is_shared();
        if since.elapsed() < HEARTBEAT && !changed {
            if let Err(e) = engine.look_at_others() {
                tracing::debug!(error = %e, "cannot read how busy the other nodes are");
            }
            continue;
        }
        since = std::time::Instant::now();
        let heartbeat = Heartbeat {
            backlog: engine.own_load(),
            unready: readiness.list(),
        };
        match door.apply_now(heartbeat) {
            Ok((true, others)) => engine.note_others(others),
            Ok((false, others)) => {
                engine.note_others(others);
                tracing::warn!(
                    node = engine.node(),
                    "this node was thought lost and its name taken; joining again"
                );
                if let Err(e) = join(door) {
                    tracing::error!(error = %e, "cannot join the nodes again");
                }
            }
            Err(e) => tracing::warn!(error = %e, "heartbeat not written; trying again"),
        }
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(beating) = self.beating.take() {
            let _ = beating.join();
        }
        if let Err(e) = self.door.apply_now(LeaveNodes) {
            tracing::warn!(error = %e, "cannot record this node's stop; the others find it lost after its timeout");
        }
    }
}
