"""Run by .ci/archive: export history with idemgate, read it back with DuckDB, compare."""

import json
import os
import random
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time

import duckdb

IDEMGATE = os.environ["IDEMGATE"]
PG = os.environ.get("IDEMGATE_TEST_POSTGRES", "postgres://root@localhost/test")
DAY = 86_400_000
TODAY = int(time.time() * 1000) // DAY * DAY


def run(*args):
    out = subprocess.run([IDEMGATE, *args], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"idemgate {' '.join(args)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return out.stdout


def day(ms):
    return time.strftime("%Y-%m-%d", time.gmtime(ms / 1000))


def lookup(store_args, source, event, archive):
    return json.loads(run("lookup", *store_args, source, event, "--archive", archive, "--json"))


def fill_sqlite(data, plan):
    """plan: ((source, (days ago...), events per day), ...) -> {(source, day): rows}."""
    run("migrate", "--data-dir", data)
    db = sqlite3.connect(os.path.join(data, "idemgate.db"))
    expected = {}
    for source, days, per_day in plan:
        for ago in days:
            start = TODAY - ago * DAY
            rows = []
            for i in range(per_day):
                at = start + (i * 7919) % DAY
                ev = f"evt_{ago}_{i}"
                rows.append((source, ev, "claimed", 0, 1, at, None, None))
                rows.append((source, ev, "completed", 1, 1, at + 5, None, "fine" if i % 3 == 0 else None))
            db.executemany(
                "INSERT INTO history (source, event_id, outcome, processed, attempt, received_at, gap_ms, note) VALUES (?,?,?,?,?,?,?,?)",
                rows,
            )
            expected[(source, day(start))] = 2 * per_day
    db.commit()
    return db, expected


def check(name, store_args, archive_dir, expected, sample, delete, archive_url=None):
    """expected: {(source, day): rows}; sample: [(source, event)]; delete: drops the store's rows."""
    glob = f"{archive_dir}/**/*.parquet"
    got = {
        (s, str(d)): n
        for s, d, n in duckdb.sql(
            f"SELECT source, day, count(*) FROM read_parquet('{glob}', hive_partitioning = true) GROUP BY ALL"
        ).fetchall()
    }
    if got != expected:
        sys.exit(f"{name}: DuckDB counts {got}, the store {expected}")
    # Every file's own source column agrees with its directory.
    bad = duckdb.sql(
        f"SELECT count(*) FROM read_parquet('{glob}', hive_partitioning = false, filename = true) "
        "WHERE filename NOT LIKE '%source=' || source || '/%'"
    ).fetchone()[0]
    if bad:
        sys.exit(f"{name}: {bad} rows whose source is not their directory's")
    url = archive_url or f"file://{archive_dir}"
    before = {e: lookup(store_args, s, e, url) for s, e in sample}
    delete()
    for source, event in sample:
        after = lookup(store_args, source, event, url)
        if after["found_in"] != "archive":
            sys.exit(f"{name}: {event} not found in the archive once deleted: {after}")
        rows = duckdb.sql(
            f"SELECT outcome, attempt, epoch_ms(received_at) "
            f"FROM read_parquet('{glob}', hive_partitioning = true) "
            f"WHERE source = '{source}' AND event_id = '{event}' ORDER BY received_at, outcome"
        ).fetchall()
        want = sorted((h["outcome"], h["attempt"], h["at"]) for h in before[event]["history"])
        duck = sorted(
            (o, a, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z")
            for o, a, ms in rows
        )
        looked = sorted((h["outcome"], h["attempt"], h["at"]) for h in after["history"])
        if not (want == duck == looked):
            sys.exit(f"{name}: {event}: store {want}, DuckDB {duck}, lookup from the archive {looked}")
    print(f"{name}: DuckDB read {sum(got.values())} rows in {len(got)} days, as the store counted; "
          f"{len(sample)} events alike in the store, in DuckDB and in lookup from the archive")


def sqlite_case(tmp):
    data = os.path.join(tmp, "data")
    db, expected = fill_sqlite(data, (("stripe", (6, 5, 4), 4000), ("github", (5,), 1500)))
    archive = os.path.join(tmp, "sqlite-archive")
    run("history", "export", "--data-dir", data, "--since", day(TODAY - 10 * DAY),
        "--until", day(TODAY - DAY), "--to", f"file://{archive}")
    sample = [("stripe", f"evt_{random.choice((6, 5, 4))}_{random.randrange(4000)}") for _ in range(15)]
    sample += [("github", f"evt_5_{random.randrange(1500)}") for _ in range(5)]

    def delete():
        db.execute("DELETE FROM history")
        db.commit()

    check("SQLite", ["--data-dir", data], archive, expected, sample, delete)


def psql(sql):
    env = dict(os.environ, PGOPTIONS="-c client_min_messages=warning")
    subprocess.run(["psql", PG, "-v", "ON_ERROR_STOP=1", "-q", "-c", sql], check=True, env=env)


def postgres_case(tmp):
    schema = f"ci_archive_{os.getpid()}"
    store = ["--postgres", PG, "--schema", schema]
    run("migrate", *store)
    try:
        expected = {}
        for back in (3, 2):
            psql(f"""
                SET search_path = {schema};
                DO $$
                DECLARE m timestamptz := date_trunc('month', now() AT TIME ZONE 'UTC' - interval '{back} months') AT TIME ZONE 'UTC';
                BEGIN
                  EXECUTE format('CREATE TABLE %I PARTITION OF history FOR VALUES FROM (%L) TO (%L)',
                                 'history_' || to_char(m AT TIME ZONE 'UTC', '"y"YYYY"m"MM'), m, m + interval '1 month');
                END $$;
                INSERT INTO history (source, event_id, outcome, processed, attempt, received_at, note)
                SELECT 'stripe', 'evt_{back}_' || g, o, o = 'completed', 1,
                       date_trunc('month', now() AT TIME ZONE 'UTC' - interval '{back} months') AT TIME ZONE 'UTC'
                         + (g % 3) * interval '1 day' + g * interval '1 second',
                       CASE WHEN o = 'completed' AND g % 5 = 0 THEN 'fine' END
                  FROM generate_series(1, 3000) g, (VALUES ('claimed'), ('completed')) v(o);
            """)
        out = subprocess.run(
            ["psql", PG, "-At", "-c",
             f"SELECT source, to_char(received_at AT TIME ZONE 'UTC', 'YYYY-MM-DD'), count(*) FROM {schema}.history GROUP BY 1, 2"],
            capture_output=True, text=True, check=True).stdout
        for line in out.split():
            s, d, n = line.split("|")
            expected[(s, d)] = int(n)
        archive = os.path.join(tmp, "pg-archive")
        run("history", "export", *store, "--since", day(TODAY - 200 * DAY),
            "--until", day(TODAY - DAY), "--to", f"file://{archive}")
        sample = [("stripe", f"evt_{random.choice((3, 2))}_{random.randrange(1, 3001)}") for _ in range(20)]
        check("PostgreSQL", store, archive, expected, sample,
              lambda: psql(f"DELETE FROM {schema}.history"))
    finally:
        psql(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start_moto(port, env=None):
    server = subprocess.Popen(
        ["moto_server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
    )
    deadline = time.time() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server
        except OSError:
            if time.time() > deadline:
                server.kill()
                sys.exit("moto_server did not listen within 30 s")
            time.sleep(0.1)


def wrong_credentials_case(tmp):
    """A moto that checks credentials (all but its first request): the export is refused 403,
    and idemgate says to check the archive's credentials."""
    import boto3

    port = free_port()
    server = start_moto(port, dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT="1"))
    try:
        endpoint = f"http://127.0.0.1:{port}"
        boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="test",
                     aws_secret_access_key="test", region_name="us-east-1").create_bucket(Bucket="checked")
        data = os.path.join(tmp, "auth-data")
        fill_sqlite(data, (("stripe", (3,), 10),))
        config = os.path.join(tmp, "auth.toml")
        with open(config, "w") as f:
            f.write(f'[store]\npath = "{data}"\n[history.archive]\nurl = "s3://checked/h"\n'
                    f'endpoint = "{endpoint}"\npath_style = true\n'
                    'access_key_id = "AKIAWRONG"\nsecret_access_key = "wrong"\n')
        out = subprocess.run([IDEMGATE, "history", "export", "--config", config, "--since",
                              day(TODAY - 5 * DAY), "--until", day(TODAY - DAY)],
                             capture_output=True, text=True)
        if out.returncode == 0 or "check the archive's credentials" not in out.stderr \
                or "wrong" in out.stderr.replace("AKIAWRONG", ""):
            sys.exit(f"S3 with wrong credentials: exit {out.returncode}, {out.stderr}")
        print("S3 (moto, credentials checked): wrong credentials refused, named, the secret not shown")
    finally:
        server.terminate()
        server.wait()


def s3_case(tmp):
    """S3: a local moto server (PyPI, the S3 API in-process: no cloud endpoint, no daemon to
    install); the export goes through it, the files are fetched back with boto3 and read by
    DuckDB locally, and lookup reads the archive over S3."""
    import boto3

    port = free_port()
    server = start_moto(port)
    try:
        endpoint = f"http://127.0.0.1:{port}"
        s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="test",
                          aws_secret_access_key="test", region_name="us-east-1")
        s3.create_bucket(Bucket="idemgate-archive")
        data = os.path.join(tmp, "s3-data")
        db, expected = fill_sqlite(data, (("stripe", (3, 2), 2500),))
        config = os.path.join(tmp, "s3.toml")

        def write_config(url):
            with open(config, "w") as f:
                f.write(f'[store]\npath = "{data}"\n[history.archive]\nurl = "{url}"\n'
                        f'endpoint = "{endpoint}"\nregion = "us-east-1"\npath_style = true\n'
                        'access_key_id = "test"\nsecret_access_key = "test"\n')

        since, until = day(TODAY - 10 * DAY), day(TODAY - DAY)
        # A bucket that does not exist: the export fails, naming it, and writes nothing.
        write_config("s3://no-such-bucket/history")
        out = subprocess.run([IDEMGATE, "history", "export", "--config", config, "--since", since,
                              "--until", until], capture_output=True, text=True)
        if out.returncode == 0 or "no-such-bucket" not in out.stderr or "does not exist" not in out.stderr:
            sys.exit(f"S3: export into a missing bucket: exit {out.returncode}, {out.stderr}")
        write_config("s3://idemgate-archive/history")
        run("history", "export", "--config", config, "--since", since, "--until", until)
        keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="idemgate-archive")["Contents"])
        local = os.path.join(tmp, "s3-copy")
        for key in keys:
            if not key.startswith("history/source=stripe/day="):
                sys.exit(f"S3: unexpected key {key}")
            path = os.path.join(local, key[len("history/"):])
            os.makedirs(os.path.dirname(path), exist_ok=True)
            s3.download_file("idemgate-archive", key, path)
        sample = [("stripe", f"evt_{random.choice((3, 2))}_{random.randrange(2500)}") for _ in range(10)]

        def delete():
            db.execute("DELETE FROM history")
            db.commit()

        # Lookups read S3 (the config's archive); DuckDB reads the copy.
        check("S3 (moto)", ["--config", config], local, expected, sample, delete,
              archive_url="s3://idemgate-archive/history")
        print(f"S3 (moto): {len(keys)} objects under s3://idemgate-archive/history")
    finally:
        server.terminate()
        server.wait()


def main():
    random.seed(int(os.environ.get("ARCHIVE_SEED", "1")))
    with tempfile.TemporaryDirectory() as tmp:
        sqlite_case(tmp)
        postgres_case(tmp)
        s3_case(tmp)
        wrong_credentials_case(tmp)


main()
