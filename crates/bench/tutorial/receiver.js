'use strict';
// The Stripe webhook receiver most tutorials show, for `idemgate-bench gateway` to measure beside
// idemgate: Express with the raw body, `stripe.webhooks.constructEvent`, then the usual
// "claimEvent": an INSERT ... ON CONFLICT (event_id) DO NOTHING on a node-postgres Pool. A
// duplicate answers 200; a new event is forwarded to the downstream and answers 200 once the
// downstream took it; if the downstream fails, the claim is deleted (so Stripe's retry is
// processed) and the answer is 500.
//
// Two workers under node's `cluster` module (one per core), as such a receiver is deployed.
//
// Environment: PORT, DATABASE_URL, SECRET (the endpoint's signing secret), DOWNSTREAM (the URL
// forwarded to); SCHEMA (default `tutorial`, created with its table if absent), WORKERS
// (default 2). The primary prints `ready` once every worker listens, and stops the workers and
// exits when its standard input closes or on SIGTERM.

const cluster = require('node:cluster');

function required(name) {
  const value = process.env[name];
  if (!value) {
    console.error(`receiver.js: ${name} is not set`);
    process.exit(2);
  }
  return value;
}

const PORT = Number(required('PORT'));
const DATABASE_URL = required('DATABASE_URL');
const SECRET = required('SECRET');
const DOWNSTREAM = required('DOWNSTREAM');
const SCHEMA = process.env.SCHEMA || 'tutorial';
const WORKERS = Number(process.env.WORKERS || 2);

if (!Number.isInteger(PORT) || PORT < 1 || PORT > 65535) {
  console.error(`receiver.js: PORT must be a TCP port, not ${JSON.stringify(process.env.PORT)}`);
  process.exit(2);
}
if (!/^[a-z_][a-z0-9_]*$/.test(SCHEMA)) {
  console.error(`receiver.js: SCHEMA must be a lower-case SQL identifier, not ${JSON.stringify(SCHEMA)}`);
  process.exit(2);
}
if (!Number.isInteger(WORKERS) || WORKERS < 1) {
  console.error(`receiver.js: WORKERS must be a positive integer, not ${JSON.stringify(process.env.WORKERS)}`);
  process.exit(2);
}

const TABLE = `${SCHEMA}.processed_events`;

if (cluster.isPrimary) {
  primary().catch((err) => {
    console.error(`receiver.js: ${err.message}`);
    process.exit(1);
  });
} else {
  worker();
}

async function primary() {
  const { Client } = require('pg');
  const client = new Client({ connectionString: DATABASE_URL });
  await client.connect();
  await client.query(`CREATE SCHEMA IF NOT EXISTS ${SCHEMA}`);
  await client.query(`CREATE TABLE IF NOT EXISTS ${TABLE} (
    event_id text PRIMARY KEY,
    event_type text NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now()
  )`);
  await client.end();

  let stopping = false;
  const stop = () => {
    stopping = true;
    for (const w of Object.values(cluster.workers)) w.process.kill('SIGTERM');
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  process.stdin.on('end', stop);
  process.stdin.resume();

  let listening = 0;
  cluster.on('listening', () => {
    listening += 1;
    if (listening === WORKERS) console.log(`ready: ${WORKERS} workers on port ${PORT}`);
  });
  cluster.on('exit', (w, code, signal) => {
    if (stopping) return;
    console.error(`receiver.js: worker ${w.process.pid} exited (${signal || code})`);
    process.exit(1);
  });
  for (let i = 0; i < WORKERS; i += 1) cluster.fork();
}

function worker() {
  const express = require('express');
  const Stripe = require('stripe');
  const { Pool } = require('pg');

  // constructEvent needs no API key; the tutorials make the client with one all the same.
  const stripe = new Stripe('sk_test_not_used');
  const pool = new Pool({ connectionString: DATABASE_URL });
  pool.on('error', (err) => console.error(`receiver.js: idle database connection: ${err.message}`));

  // The first insert wins: true when this delivery claimed the event.
  async function claimEvent(event) {
    const { rows } = await pool.query(
      `INSERT INTO ${TABLE} (event_id, event_type) VALUES ($1, $2)
       ON CONFLICT (event_id) DO NOTHING RETURNING event_id`,
      [event.id, event.type],
    );
    return rows.length === 1;
  }

  async function releaseEvent(event) {
    await pool.query(`DELETE FROM ${TABLE} WHERE event_id = $1`, [event.id]);
  }

  const app = express();
  app.post('/hooks/stripe-live', express.raw({ type: 'application/json' }), async (req, res) => {
    let event;
    try {
      event = stripe.webhooks.constructEvent(req.body, req.headers['stripe-signature'], SECRET);
    } catch (err) {
      return res.status(400).send(`Webhook Error: ${err.message}`);
    }
    try {
      if (!(await claimEvent(event))) {
        return res.status(200).json({ received: true, duplicate: true });
      }
    } catch (err) {
      return res.status(500).send(`Database Error: ${err.message}`);
    }
    try {
      const down = await fetch(DOWNSTREAM, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: req.body,
      });
      await down.arrayBuffer();
      if (!down.ok) throw new Error(`downstream answered ${down.status}`);
    } catch (err) {
      await releaseEvent(event).catch(() => {});
      return res.status(500).send(`Forward Error: ${err.message}`);
    }
    return res.status(200).json({ received: true });
  });

  // The primary went away: nothing will stop this worker otherwise.
  process.on('disconnect', () => process.exit(0));
  app.listen(PORT, (err) => {
    if (err) {
      console.error(`receiver.js: cannot listen on port ${PORT}: ${err.message}`);
      process.exit(1);
    }
  });
}
