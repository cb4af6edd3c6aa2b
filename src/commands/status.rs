//! `relayq status`: counts per queue and state, and how old the oldest unfinished row is.

use serde_json::json;

use crate::cli::{CliError, Context};
use crate::commands::open_existing;

pub fn run(ctx: &Context, as_json: bool) -> Result<(), CliError> {
    let engine = open_existing(ctx)?.engine.clone();
    let counts = engine.counts()?;
    let oldest = engine.oldest_pending()?;
    let now = engine.now();
    let age_secs = |created: i64| (now - created).max(0) as f64 / 1000.0;
    if as_json {
        let oldest: Vec<_> = oldest
            .iter()
            .map(|o| json!({"queue": o.queue, "id": o.id, "age_seconds": age_secs(o.created_at)}))
            .collect();
        println!("{}", json!({"counts": counts, "oldest_pending": oldest}));
        return Ok(());
    }
    if counts.is_empty() {
        println!("no rows in {}", engine.database().path().display());
        return Ok(());
    }
    println!(
        "{:<10} {:<10} {:<20} {:>10}",
        "QUEUE", "STATE", "REASON", "COUNT"
    );
    for c in &counts {
        println!(
            "{:<10} {:<10} {:<20} {:>10}",
            c.queue,
            c.state,
            c.reason.as_deref().unwrap_or("-"),
            c.count
        );
    }
    for o in &oldest {
        println!(
            "oldest pending in {}: row {}, {:.1}s old",
            o.queue,
            o.id,
            age_secs(o.created_at)
        );
    }
    Ok(())
}
