// express-idempotency in front of an upstream payments API, as its README sets it up: the
// middleware with its default (in-memory) data adapter on the POST route, and a handler that
// returns early when the middleware already answered (`isHit`), otherwise does the work, here
// proxying the keyed POST (its Idempotency-Key included) to the upstream and sending its answer.
// `idemgate-bench sidecar` measures it beside the sidecar in front of the same upstream.
//
//   node tests/sidecar/express_proxy.mjs http://127.0.0.1:UPSTREAM_PORT PORT [WORKERS]
//
// WORKERS (default 1) > 1 runs that many cluster workers sharing PORT, each with its own
// in-memory adapter (what a multi-core deployment of the default adapter amounts to). Prints
// "ready PORT" once listening.
import cluster from "node:cluster";
import http from "node:http";
import express from "express";
import { getSharedIdempotencyService, idempotency } from "express-idempotency";

const [upstreamArg, portArg, workersArg] = process.argv.slice(2);
if (!upstreamArg || !portArg) {
  console.error("usage: express_proxy.mjs UPSTREAM_URL PORT [WORKERS]");
  process.exit(2);
}
const upstream = new URL(upstreamArg);
const port = Number(portArg);
const workers = Number(workersArg ?? 1);

if (workers > 1 && cluster.isPrimary) {
  let ready = 0;
  for (let i = 0; i < workers; i++) {
    cluster.fork().on("message", (m) => {
      if (m === "ready" && ++ready === workers) console.log(`ready ${port}`);
    });
  }
  const stop = () => {
    for (const w of Object.values(cluster.workers)) w.kill();
    process.exit(0);
  };
  process.on("SIGTERM", stop);
  process.stdin.on("end", stop);
  process.stdin.resume();
} else {
  serve();
}

function serve() {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 256 });
  const app = express();
  app.disable("x-powered-by");
  app.disable("etag");
  app.use(express.json());
  app.post("*", idempotency());

  app.post("/v1/payments", (req, res, next) => {
    if (getSharedIdempotencyService().isHit(req)) return;
    const body = JSON.stringify(req.body);
    const headers = { "content-type": "application/json", "content-length": Buffer.byteLength(body) };
    const key = req.get("idempotency-key");
    if (key !== undefined) headers["idempotency-key"] = key;
    const out = http.request(
      {
        host: upstream.hostname,
        port: upstream.port,
        method: "POST",
        path: req.originalUrl,
        headers,
        agent,
      },
      (answer) => {
        const chunks = [];
        answer.on("data", (c) => chunks.push(c));
        answer.on("end", () => {
          for (const [name, value] of Object.entries(answer.headers)) {
            if (!["connection", "keep-alive", "transfer-encoding", "content-length", "date"].includes(name)) {
              res.setHeader(name, value);
            }
          }
          res.status(answer.statusCode).send(Buffer.concat(chunks).toString());
        });
        answer.on("error", next);
      },
    );
    out.on("error", (e) => {
      // What the README says to do when the work fails: the key is given back.
      getSharedIdempotencyService().reportError(req);
      res.status(502).json({ error: String(e) });
    });
    out.end(body);
  });

  // The middleware answers a copy whose first is still running by passing an error on with the
  // status set (409), and a misused key likewise (417): answered here without a stack trace.
  app.use((err, req, res, _next) => {
    const status = res.statusCode >= 400 ? res.statusCode : 500;
    if (!res.headersSent) res.status(status).json({ error: err.message });
  });

  const server = app.listen(port, "127.0.0.1", () => {
    if (cluster.isWorker) process.send("ready");
    else console.log(`ready ${port}`);
  });
  server.keepAliveTimeout = 120_000;
  server.headersTimeout = 121_000;
  if (!cluster.isWorker) {
    process.stdin.on("end", () => server.close(() => process.exit(0)));
    process.stdin.resume();
  }
}
