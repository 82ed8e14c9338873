// A small payments API standing in for the user's own: it counts the payments it creates, is
// slow on a key's first attempt when asked (longer than the client's timeout), and fails a key's
// first attempt with a 500 when asked. Bodies are form-encoded, as the stripe package sends them.
import http from "node:http";

export function startPaymentsApi({ slowFirstMs = 0, failFirst = false, slowMs = 0 } = {}) {
  const attempts = new Map();
  const state = { created: 0, requests: 0 };
  const server = http.createServer((req, res) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", async () => {
      state.requests += 1;
      if (req.method === "GET" && req.url === "/v1/balance") {
        res.writeHead(200, { "content-type": "application/json" });
        res.end(JSON.stringify({ object: "balance", available: [] }));
        return;
      }
      if (req.method !== "POST" || req.url !== "/v1/payment_intents") {
        res.writeHead(404, { "content-type": "application/json" });
        res.end(JSON.stringify({ error: { message: "no such route" } }));
        return;
      }
      const key = req.headers["idempotency-key"] ?? "";
      const attempt = (attempts.get(key) ?? 0) + 1;
      attempts.set(key, attempt);
      if (failFirst && attempt === 1) {
        res.writeHead(500, { "content-type": "application/json" });
        res.end(JSON.stringify({ error: { type: "api_error", message: "try again" } }));
        return;
      }
      const wait = (slowFirstMs && attempt === 1 ? slowFirstMs : 0) + slowMs;
      if (wait) await new Promise((r) => setTimeout(r, wait));
      state.created += 1;
      const form = new URLSearchParams(body);
      const intent = {
        id: `pi_${state.created}`,
        object: "payment_intent",
        amount: Number(form.get("amount")),
        currency: form.get("currency"),
        status: "requires_payment_method",
      };
      res.writeHead(200, { "content-type": "application/json", "request-id": `req_${state.created}` });
      res.end(JSON.stringify(intent));
    });
  });
  return new Promise((resolve) =>
    server.listen(0, "127.0.0.1", () => resolve({ server, state, port: server.address().port })),
  );
}
