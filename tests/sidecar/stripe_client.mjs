// The sidecar in front of a payments API, driven by the stripe npm package (which keys every POST
// itself, `Idempotency-Key: stripe-node-retry-<uuid>`, and retries timeouts, 409s and 5xx) and by
// raw concurrent requests. Each scenario has its own API and its own [[api]] of one idemgate.
//
//   node tests/sidecar/stripe_client.mjs target/debug/idemgate
//
// Exits 0 when every scenario holds, printing one line per scenario.
import { spawn } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import Stripe from "stripe";
import { startPaymentsApi } from "./payments_api.mjs";

const bin = process.argv[2] ?? "target/debug/idemgate";

function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

async function waitListening(port, child) {
  for (let i = 0; i < 600; i++) {
    if (child.exitCode !== null) throw new Error(`idemgate exited with ${child.exitCode}`);
    const up = await new Promise((resolve) => {
      const c = net.connect(port, "127.0.0.1");
      c.on("connect", () => (c.destroy(), resolve(true)));
      c.on("error", () => resolve(false));
    });
    if (up) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`nothing listens on ${port}`);
}

const failures = [];
function check(name, ok, detail) {
  console.log(`${ok ? "ok  " : "FAIL"} ${name}: ${detail}`);
  if (!ok) failures.push(name);
}

const apis = {
  slow: await startPaymentsApi({ slowFirstMs: 2500 }),
  race: await startPaymentsApi({ slowMs: 300 }),
  changed: await startPaymentsApi(),
  failing: await startPaymentsApi({ failFirst: true }),
};
const ports = {};
for (const name of Object.keys(apis)) ports[name] = await freePort();
const gatewayPort = await freePort();
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "idemgate-sidecar-"));
let config = `listen = "127.0.0.1:${gatewayPort}"\n[store]\npath = ${JSON.stringify(path.join(dir, "data"))}\n`;
for (const [name, api] of Object.entries(apis)) {
  config += `
[[api]]
name = "payments-${name}"
listen = "127.0.0.1:${ports[name]}"
upstream = "http://127.0.0.1:${api.port}"
routes = ["POST /v1/payment_intents"]
principal = "bearer"
retry_window = "24h"
upstream_timeout = "10s"
`;
}
fs.writeFileSync(path.join(dir, "idemgate.toml"), config);
const gateway = spawn(bin, ["serve", "--config", path.join(dir, "idemgate.toml")], {
  stdio: ["ignore", "inherit", "inherit"],
  env: { ...process.env, IDEMGATE_LOG: process.env.IDEMGATE_LOG ?? "warn" },
});
try {
  for (const name of Object.keys(ports)) await waitListening(ports[name], gateway);

  const client = (port, timeout) =>
    new Stripe("sk_test_sidecar", {
      host: "127.0.0.1",
      port,
      protocol: "http",
      maxNetworkRetries: 10,
      timeout,
    });

  // 1. The first attempt is slower than the client's timeout: the client hangs up and retries
  //    with the same key; the sidecar hears 409 meanwhile, then gives back the first response.
  {
    const started = Date.now();
    const intent = await client(ports.slow, 1000).paymentIntents.create({ amount: 1000, currency: "usd" });
    const { created, requests } = apis.slow.state;
    check(
      "a retry after the client's timeout",
      created === 1 && intent.id === "pi_1" && intent.amount === 1000,
      `${created} payment created, ${requests} reached the API; the client got ${intent.id} after ${Date.now() - started} ms`,
    );
  }

  // 2. 64 concurrent copies of one key: one creation; the rest 409 or the replay.
  {
    const key = `race-${Date.now()}`;
    const send = () =>
      fetch(`http://127.0.0.1:${ports.race}/v1/payment_intents`, {
        method: "POST",
        headers: {
          "content-type": "application/x-www-form-urlencoded",
          authorization: "Bearer sk_test_sidecar",
          "idempotency-key": key,
        },
        body: "amount=2500&currency=eur",
      }).then(async (r) => ({ status: r.status, replayed: r.headers.get("idempotent-replayed"), body: await r.text() }));
    const answers = await Promise.all(Array.from({ length: 64 }, send));
    const first = answers.filter((a) => a.status === 200 && !a.replayed);
    const replays = answers.filter((a) => a.status === 200 && a.replayed === "true");
    const busy = answers.filter((a) => a.status === 409);
    const other = answers.length - first.length - replays.length - busy.length;
    const sameBody = replays.every((a) => a.body === first[0]?.body);
    check(
      "64 concurrent copies of one key",
      apis.race.state.created === 1 && first.length === 1 && other === 0 && sameBody,
      `${apis.race.state.created} created; ${first.length} first answer, ${replays.length} replays (same bytes: ${sameBody}), ${busy.length} 409, ${other} other`,
    );
  }

  // 3. The same key with another body: 422, nothing created again.
  {
    const key = `changed-${Date.now()}`;
    const send = (amount) =>
      fetch(`http://127.0.0.1:${ports.changed}/v1/payment_intents`, {
        method: "POST",
        headers: {
          "content-type": "application/x-www-form-urlencoded",
          authorization: "Bearer sk_test_sidecar",
          "idempotency-key": key,
        },
        body: `amount=${amount}&currency=usd`,
      });
    const first = await send(1000);
    const changed = await send(9999);
    const problem = await changed.json();
    check(
      "the same key with another body",
      first.status === 200 && changed.status === 422 && problem.type === "urn:idemgate:problem:idempotency_key_reused" && apis.changed.state.created === 1,
      `first ${first.status}, changed ${changed.status} ${problem.type}; ${apis.changed.state.created} created`,
    );
    // Through the stripe package too: it surfaces the 422 as an error and does not retry it.
    let refused = null;
    try {
      const got = await client(ports.changed, 5000).paymentIntents.create(
        { amount: 1, currency: "usd" },
        { idempotencyKey: key },
      );
      refused = `no error: ${JSON.stringify(got)}`;
    } catch (e) {
      refused = e.statusCode ?? `${e.type}: ${e.message}`;
    }
    check("stripe sees the reused key refused", refused === 422, `status ${refused}`);
  }

  // 4. The upstream answers 500 first: the key is released, the client's retry creates it once.
  {
    const intent = await client(ports.failing, 5000).paymentIntents.create({ amount: 700, currency: "usd" });
    const { created, requests } = apis.failing.state;
    check(
      "an upstream 500 releases the key",
      created === 1 && requests === 2 && intent.id === "pi_1",
      `${requests} requests reached the API, ${created} payment created; the client got ${intent.id}`,
    );
  }

  // 5. A route that is not keyed passes through untouched.
  {
    const balance = await client(ports.changed, 5000).balance.retrieve();
    check("an unkeyed route passes through", balance.object === "balance", `got ${balance.object}`);
  }
} finally {
  gateway.kill("SIGTERM");
  for (const api of Object.values(apis)) api.server.close();
  await new Promise((r) => gateway.on("exit", r));
  fs.rmSync(dir, { recursive: true, force: true });
}
if (failures.length) {
  console.error(`${failures.length} scenario(s) failed: ${failures.join(", ")}`);
  process.exit(1);
}
console.log("every scenario held: 0 double creations");
