// The job-queue peer of relayq's PostgreSQL scenario (bench/src/postgres.rs): graphile-worker
// 0.16.6 (from npm, installed outside the tree by install.sh) on the same server, each key a
// named queue (graphile-worker runs a queue's jobs one at a time, in order: per-key FIFO).
//
//   node run.cjs SOCKET_DIR N KEYS CONCURRENCY
//
// Jobs are added with the `graphile_worker.add_job` SQL function, 100 per transaction (its
// fastest path), while the worker runs with CONCURRENCY jobs at once; the worker hears new jobs
// by LISTEN/NOTIFY (pollInterval only matters for retries). Prints jobs/s from the first add to
// the last job done, after checking each queue's jobs ran in order.
const { Pool } = require("pg");
const { run, Logger } = require("graphile-worker");

// Quiet: a line per job on stdout would be what is measured.
const quiet = new Logger(() => () => {});

async function main() {
  const [dir, n, keys, concurrency] = process.argv.slice(2);
  const total = Number(n);
  const pgPool = new Pool({ host: dir, user: "postgres", database: "postgres", max: Number(concurrency) + 4 });
  // Each run starts on an empty queue: jobs an earlier run left (retrying) would run here.
  await pgPool
    .query("DELETE FROM graphile_worker._private_jobs; DELETE FROM graphile_worker._private_job_queues")
    .catch(() => {}); // no schema yet: the first run makes it
  const last = new Map();
  let done = 0;
  let broken = null;
  let finish;
  const finished = new Promise((resolve) => (finish = resolve));
  const runner = await run({
    pgPool,
    concurrency: Number(concurrency),
    noHandleSignals: true,
    pollInterval: 1000,
    logger: quiet,
    taskList: {
      noop: async (payload) => {
        const prev = last.get(payload.k);
        if (prev !== undefined && payload.s <= prev) {
          // Out of order: the run is void (and would wait for the job's retries for minutes).
          broken = `queue ${payload.k}: job ${payload.s} ran after ${prev}`;
          finish();
          return;
        }
        last.set(payload.k, payload.s);
        done += 1;
        if (done === total) finish();
      },
    },
  });
  const started = process.hrtime.bigint();
  const client = await pgPool.connect();
  for (let from = 0; from < total; from += 100) {
    const upto = Math.min(total, from + 100);
    await client.query("BEGIN");
    await client.query(
      `SELECT graphile_worker.add_job('noop', json_build_object('k', 'k' || (i % $3), 's', i / $3),
                                      queue_name => 'k' || (i % $3))
       FROM generate_series($1::int, $2::int - 1) AS i`,
      [from, upto, Number(keys)],
    );
    await client.query("COMMIT");
  }
  client.release();
  await finished;
  const secs = Number(process.hrtime.bigint() - started) / 1e9;
  await runner.stop();
  await pgPool.end();
  if (broken) {
    console.error(`FIFO broken: ${broken}`);
    process.exit(3);
  }
  console.log((total / secs).toFixed(1));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
