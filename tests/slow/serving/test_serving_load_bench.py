"""bench/serving_load.py runs end to end (#57 point 4), briefly: 2 clients for 3 s in 1 turn against `foundry
serve-model` and llama.cpp's own server (`llama_cpp.server`), on the bench's own version (the default config's
architecture with random weights, about 5 MB, in a Foundry home of its own: a tinier one would not hold the bench's
prompts and outputs). Every request answered by both, and the last line, the ratio, printed. About 30 s; the
figures themselves are the full run's (bench/README.md), not this one's."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SERVERS = ("foundry serve-model", "llama.cpp server")


def test_the_load_bench_answers_every_request_and_prints_the_ratio(tmp_path):
    command = [sys.executable, str(REPO / "bench" / "serving_load.py"), "--clients", "2", "--seconds", "3"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp_path)}
    run = subprocess.run([*command, "--rounds", "1"], env=env, capture_output=True, text=True, timeout=120, check=False)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-3000:]
    assert "llama_cpp.server cannot start" not in out, out[-3000:]  # llama.cpp's own server, not the stand-in
    for server in SERVERS:
        line = re.search(rf"^{server}: (\d+) requests answered, (\d+) errors", out, re.MULTILINE)
        assert line and int(line[1]) > 0 and int(line[2]) == 0, out[-3000:]
    last = run.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"serving load: foundry \d+\.\d\dx llama\.cpp output tokens/s \([\d,.]+ vs [\d,.]+\)", last), (
        out
    )
