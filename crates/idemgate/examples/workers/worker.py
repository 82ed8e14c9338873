#!/usr/bin/env python3
"""A worker in Python on idemgate's HTTP claim API: each job processed once, however often it
is delivered. Standard library only.

Against the demo gateway (`idemgate serve` without a config: source "demo", API token
"demo-token-change-me", on 127.0.0.1:8080), from the repository's root:

<!-- ci: run worker_py -->
```sh
idemgate serve &
python3 crates/idemgate/examples/workers/worker.py
```

It prints "30 deliveries of 10 jobs: 10 processed, 20 duplicates" and fails unless each job was
processed once. Against your own gateway, IDEMGATE_URL, IDEMGATE_TOKEN (one of its api_tokens)
and IDEMGATE_SOURCE (one of its sources) say where.
"""
import json
import os
import sys
import time
import urllib.error
import urllib.request

URL = os.environ.get("IDEMGATE_URL", "http://127.0.0.1:8080")
TOKEN = os.environ.get("IDEMGATE_TOKEN", "demo-token-change-me")
SOURCE = os.environ.get("IDEMGATE_SOURCE", "demo")
RUN = os.environ.get("RUN_ID", str(os.getpid()))


def call(path, body):
    req = urllib.request.Request(
        URL + path,
        data=json.dumps(body).encode(),
        headers={"Authorization": "Bearer " + TOKEN, "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.headers.get("Idemgate-Outcome"), json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Idemgate-Outcome"), json.loads(e.read())


def handle(job_id, processed):
    """One delivery of a job: claim it, do the work, complete it (or release it on failure)."""
    while True:
        status, outcome, answer = call("/v1/claims", {"source": SOURCE, "event_id": job_id})
        if outcome == "claimed":
            try:
                processed.append(job_id)  # the real work goes here
            except Exception:
                call(f"/v1/claims/{SOURCE}/{job_id}/release", {"token": answer["token"]})
                raise
            status, outcome, _ = call(f"/v1/claims/{SOURCE}/{job_id}/complete", {"token": answer["token"]})
            assert outcome == "completed", (status, outcome)
            return "processed"
        if outcome == "duplicate":
            return "duplicate"
        if outcome == "in_flight":
            # Another delivery holds it. Its lease ends at retry_after_s at the latest; it is
            # usually done well before: look again in a second.
            time.sleep(min(int(answer.get("retry_after_s", 1)), 1))
            continue
        raise SystemExit(f"unexpected answer {status} {outcome}: {answer}")


def main():
    jobs = [f"py-{RUN}-{n}" for n in range(1, 11)]
    processed = []
    results = [handle(job, processed) for job in jobs * 3]  # every job delivered three times
    print(f"30 deliveries of 10 jobs: {results.count('processed')} processed, "
          f"{results.count('duplicate')} duplicates")
    if sorted(processed) != sorted(jobs):
        sys.exit(f"each job should be processed once, got {processed}")


if __name__ == "__main__":
    main()
