"""Moving data figures: import_mem0 from a Mem0 export file, then export_project and
import_project (--new-ids) of the project it made, each run as its own process (as an operator
runs it): wall time, memories or records per second, and the process's peak memory (max RSS).
A second import_mem0 of the same file measures the idempotent re-run (nothing imported). Each
command runs once (its wall time is the figure: no percentiles). At the end the run summary
(common.RunSummary): the same rates, and the peak RSS of this process, the commands (its
children, sampled every 0.5 s) and postgres.

The file is generated: N memories (default 5,000) of U users (default 50) in the Platform's
get_all shape, short sentences, each with metadata and a category.

    make migrate
    .venv/bin/python bench/transfer.py [--memories 5000 --users 50]
    (the environment of .local/engram.env is read; a new organization bench-transfer-<time>)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import RunSummary, load_local_env, sentence

load_local_env()
ROOT = Path(__file__).resolve().parent.parent
PYTHON = ROOT / ".venv" / "bin" / "python"


def run(*args: str) -> tuple[float, int, str]:
    """Run a manage.py command; (seconds, peak RSS in MB, its output)."""
    started = time.perf_counter()
    done = subprocess.run(  # noqa: S603 - our own command
        ["/usr/bin/time", "-f", "peak-rss-kb %M", str(PYTHON), "manage.py", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - started
    if done.returncode:
        sys.exit(f"manage.py {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    match = re.search(r"peak-rss-kb (\d+)", done.stderr)
    return seconds, int(match.group(1)) // 1024 if match else 0, done.stdout.strip()


def mem0_file(path: Path, memories: int, users: int, rng: random.Random) -> None:
    rows = [
        {
            "id": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
            "memory": sentence(rng),
            "user_id": f"user-{i % users}",
            "metadata": {"n": i},
            "categories": [rng.choice(["food", "travel", "work", "family"])],
            "created_at": "2025-01-01T00:00:00Z",
            "updated_at": "2025-01-02T00:00:00Z",
        }
        for i in range(memories)
    ]
    path.write_text(json.dumps({"results": rows}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memories", type=int, default=5_000)
    parser.add_argument("--users", type=int, default=50)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    org = f"bench-transfer-{int(time.time())}"
    summary = RunSummary.start(interval=0.5, rescan=1.0)  # the commands live for seconds
    with tempfile.TemporaryDirectory() as folder:
        source, dump = Path(folder) / "mem0.json", Path(folder) / "project.jsonl.gz"
        mem0_file(source, args.memories, args.users, rng)
        print(f"{args.memories} memories of {args.users} users, {org}")
        print(f"command: .venv/bin/python bench/transfer.py --memories {args.memories}")
        n = args.memories
        took, rss, _ = run("import_mem0", "--file", str(source), "--org", org, "--project", "a")
        summary.add("import_mem0 (file)", n, took, "memories")
        print(f"import_mem0 (file):      {took:6.1f} s  {n / took:7.0f} memories/s  {rss} MB")
        took, rss, _ = run("import_mem0", "--file", str(source), "--org", org, "--project", "a")
        summary.add("import_mem0 again (nothing imported)", n, took, "memories")
        print(f"import_mem0 again:       {took:6.1f} s  (nothing imported)        {rss} MB")
        took, rss, out = run("export_project", "--org", org, "--project", "a", str(dump))
        records = int(re.search(r"\((\d+) records\)", out).group(1))  # type: ignore[union-attr]
        size = dump.stat().st_size / 1e6
        summary.add("export_project", records, took, "records")
        print(
            f"export_project:          {took:6.1f} s  {records / took:7.0f} records/s   {rss} MB"
            f"  ({records} records, {size:.1f} MB gzipped)"
        )
        took, rss, _ = run("import_project", str(dump), "--org", org, "--project", "b", "--new-ids")
        summary.add("import_project --new-ids", records, took, "records")
        print(f"import_project --new-ids:{took:6.1f} s  {records / took:7.0f} records/s   {rss} MB")
    summary.report()


if __name__ == "__main__":
    os.environ.setdefault("ENGRAM_LOG_LEVEL", "WARNING")
    main()
