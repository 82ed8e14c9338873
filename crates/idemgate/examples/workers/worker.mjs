// A worker in Node.js on idemgate's HTTP claim API: each job processed once, however often it
// is delivered. No dependencies (Node 18+: global fetch).
//
// Against the demo gateway (`idemgate serve` without a config: source "demo", API token
// "demo-token-change-me", on 127.0.0.1:8080), from the repository's root:
//
// <!-- ci: run worker_node -->
// ```sh
// idemgate serve &
// node crates/idemgate/examples/workers/worker.mjs
// ```
//
// It prints "30 deliveries of 10 jobs: 10 processed, 20 duplicates" and fails unless each job
// was processed once. Against your own gateway, IDEMGATE_URL, IDEMGATE_TOKEN (one of its
// api_tokens) and IDEMGATE_SOURCE (one of its sources) say where.
const URL = process.env.IDEMGATE_URL ?? "http://127.0.0.1:8080";
const TOKEN = process.env.IDEMGATE_TOKEN ?? "demo-token-change-me";
const SOURCE = process.env.IDEMGATE_SOURCE ?? "demo";
const RUN = process.env.RUN_ID ?? String(process.pid);

async function call(path, body) {
  const r = await fetch(URL + path, {
    method: "POST",
    headers: { Authorization: `Bearer ${TOKEN}`, "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  return { status: r.status, outcome: r.headers.get("idemgate-outcome"), answer: await r.json() };
}

// One delivery of a job: claim it, do the work, complete it (or release it on failure).
async function handle(jobId, processed) {
  for (;;) {
    const { status, outcome, answer } = await call("/v1/claims", { source: SOURCE, event_id: jobId });
    if (outcome === "claimed") {
      try {
        processed.push(jobId); // the real work goes here
      } catch (e) {
        await call(`/v1/claims/${SOURCE}/${jobId}/release`, { token: answer.token });
        throw e;
      }
      const done = await call(`/v1/claims/${SOURCE}/${jobId}/complete`, { token: answer.token });
      if (done.outcome !== "completed") throw new Error(`complete: ${done.status} ${done.outcome}`);
      return "processed";
    }
    if (outcome === "duplicate") return "duplicate";
    if (outcome === "in_flight") {
      // Another delivery holds it. Its lease ends at retry_after_s at the latest; it is usually
      // done well before: look again in a second.
      await new Promise((ok) => setTimeout(ok, 1000 * Math.min(answer.retry_after_s ?? 1, 1)));
      continue;
    }
    throw new Error(`unexpected answer ${status} ${outcome}: ${JSON.stringify(answer)}`);
  }
}

const jobs = Array.from({ length: 10 }, (_, n) => `js-${RUN}-${n + 1}`);
const processed = [];
// Every job delivered three times, the three deliveries at once.
const results = (await Promise.all(jobs.map((job) => Promise.all([1, 2, 3].map(() => handle(job, processed)))))).flat();
const count = (what) => results.filter((r) => r === what).length;
console.log(`30 deliveries of 10 jobs: ${count("processed")} processed, ${count("duplicate")} duplicates`);
if (JSON.stringify([...processed].sort()) !== JSON.stringify([...jobs].sort())) {
  console.error(`each job should be processed once, got ${processed}`);
  process.exit(1);
}
