"""Serving under load: `foundry serve-model` against llama.cpp's server on the GGUF export of the same version, the
same clients sending the same requests to each in turn.

    python bench/serving_load.py [--clients 32] [--seconds 60] [--rounds 4] [--model models:/NAME@ALIAS]
                                 [--threads N] [--max-batch-rows 32]

The version is the default config's architecture (rotary positions, 2 layers of width 192, context 256, vocabulary
4096) with random weights and a BPE trained on a few standard-library modules (`bench/generate.py`'s), registered
in a temporary Foundry home, or with `--model` a registered version of $FOUNDRY_HOME (a base model: the requests
are completions). `foundry.export.gguf.write_gguf` (what `foundry export --format gguf` writes) exports it for
llama.cpp, whose server is llama-cpp-python's (`python -m llama_cpp.server`: one request at a time, its own lock;
`interrupt_requests` off so that a new request does not cut the running stream, `logits_all` off as Foundry computes
only the last position's), or where its `[server]` extras are not installed, `bench/_llama_server.py`: the same
`Llama.create_completion` calls behind the same lock, for the same streamed answers.

Each of `--clients` threads sends streamed `/v1/completions` one after the other for `--seconds`: a prompt of 8 to
120 tokens of library text and `max_tokens` of 16 to 128, drawn from the client's own seeded sequence (the same
sequence for both servers), greedy (`temperature` 0). Both servers run throughout and take turns, `--rounds` of
`--seconds / rounds` each, in the order F L, L F, F L...: on a shared machine whose load drifts, one server's
figures would otherwise be measured in a quieter minute than the other's. For each server: requests answered and errors (a status other
than 200, a broken stream, a timeout), latency p50/p99 (request to `[DONE]`), time to first token p50/p99 (request to
the first chunk with text), output tokens/s over the run (each answer's text re-encoded with the version's tokenizer:
one count for both servers), and the server process's peak resident memory. Both servers get `--threads` threads
(torch's intra-op threads through OMP_NUM_THREADS; llama.cpp's n_threads), 1 by default: llama.cpp's threads
spin while they wait for each other, and on a busy 2-core machine 2 threads made 24 tokens/s where 1 made 1,021
(bench/README.md); `--threads N` gives each N. The clients run on the same machine. The last line: Foundry's
output tokens/s over llama.cpp's.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PROMPT_TOKENS = (8, 120)  # with OUTPUT_TOKENS, within the default context (256): no window slides, neither errs
OUTPUT_TOKENS = (16, 128)
N_CTX = 256  # llama.cpp's context: the model's (512 changes nothing in its failures, see bench/README.md)
START_S = 180  # for a server to answer its first request


@dataclass
class Result:
    """One request: its latency, its time to first token (None: no text came), its output tokens, its error."""

    latency: float
    first_token: float | None
    tokens: int
    error: str | None = None
    text: str = ""
    key: tuple[int, int] = (-1, -1)  # (client, its request's index): the same request sent to the other server


@dataclass
class Load:
    """What one server answered over the run."""

    pid: int
    cursors: list[int]  # each client's next request
    results: list[Result] = field(default_factory=list)
    seconds: float = 0.0
    peak_rss: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def version(folder: Path, model: str | None) -> tuple[dict, Path, str]:
    from generate import random_version, registered_version  # bench/generate.py: this script's folder is on the path

    return registered_version(model) if model else random_version(folder)


def register(saved: dict, tokenizer: Path, folder: Path) -> str:
    """The version logged and registered in the Foundry home the environment names; its models:/ URI."""
    import torch

    from foundry.registry import versions
    from foundry.runtime import tracking
    from foundry.serving.package import log_model

    torch.save(saved, folder / "model.pt")
    run = tracking.client().create_run(tracking.experiment_id("foundry"), run_name="serving-load").info.run_id
    number = versions.register(log_model(run, folder / "model.pt", tokenizer), "serving-load", run, {})
    return f"models:/serving-load/{number}"


def requests(tokenizer, clients: int, seconds: float) -> list[list[tuple[str, int]]]:
    """Each client's sequence of (prompt text, max_tokens), longer than it can send in `seconds`."""
    from generate import library_texts

    ids = tokenizer.encode("\n".join(library_texts())).ids
    per_client = int(seconds * 20) + 10
    out = []
    for client in range(clients):
        draw = random.Random(client)
        sequence = []
        for _ in range(per_client):
            length, start = draw.randint(*PROMPT_TOKENS), draw.randrange(len(ids) - PROMPT_TOKENS[1])
            sequence.append((tokenizer.decode(ids[start : start + length]), draw.randint(*OUTPUT_TOKENS)))
        out.append(sequence)
    return out


def llama_server(gguf: Path, threads: int) -> list[str]:
    """llama-cpp-python's server for `gguf` (its command, less the port's value), or where its `[server]` extras
    are missing, `bench/_llama_server.py`: the same `Llama.create_completion` behind the same one-at-a-time lock."""
    try:
        import llama_cpp.server.app  # noqa: F401
    except ImportError as exc:
        print(f"llama_cpp.server cannot start here ({exc}): bench/_llama_server.py serves the GGUF instead")
        base = [sys.executable, str(ROOT / "bench" / "_llama_server.py"), "--model", str(gguf)]
        return [*base, "--n_ctx", str(N_CTX), "--n_threads", str(threads), "--port"]
    base = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--n_ctx", str(N_CTX)]
    base += ["--n_threads", str(threads), "--n_threads_batch", str(threads)]
    return [*base, "--interrupt_requests", "False", "--logits_all", "False", "--verbose", "False", "--port"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start(command: list[str], env: dict, log: Path, port: int) -> subprocess.Popen:
    """The server started in its own process group, once it answers /v1/models."""
    with log.open("w") as out:
        server = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + START_S
    while True:
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            connection.request("GET", "/v1/models")
            if connection.getresponse().status == 200:
                return server
        except OSError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            stop(server)
            raise SystemExit(f"{command[2]} did not start; its log ({log}):\n{log.read_text()[-3000:]}")
        time.sleep(0.5)


def stop(server: subprocess.Popen) -> None:
    try:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def complete(port: int, prompt: str, max_tokens: int, count, extra: dict) -> Result:
    """One streamed completion, greedy, with the server's `extra` fields; its text's tokens counted with `count`."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True, **extra}
    begun, first, text = time.perf_counter(), None, []
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        connection.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        answer = connection.getresponse()
        if answer.status != 200:
            return Result(time.perf_counter() - begun, None, 0, f"HTTP {answer.status}: {answer.read()[:200]!r}")
        done = False
        for line in answer:
            line = line.strip()
            if not line.startswith(b"data: "):
                continue
            if line == b"data: [DONE]":
                done = True
                break
            piece = "".join(choice.get("text") or "" for choice in json.loads(line[6:])["choices"])
            if piece and first is None:
                first = time.perf_counter() - begun
            text.append(piece)
        connection.close()
        if not done:
            return Result(time.perf_counter() - begun, first, 0, "the stream ended without [DONE]")
    except (OSError, ValueError, http.client.HTTPException) as exc:
        return Result(time.perf_counter() - begun, first, 0, f"{type(exc).__name__}: {exc}")
    return Result(time.perf_counter() - begun, first, count("".join(text)), text="".join(text))


def run_load(port: int, sequences: list[list[tuple[str, int]]], seconds: float, count, extra: dict, load: Load) -> None:
    """Every client sending its sequence, from where it stopped in the last round (`load.cursors`), until `seconds`
    have passed (the requests under way then finish); the answers added to `load`."""
    import psutil

    end, process = time.monotonic() + seconds, psutil.Process(load.pid)

    def client(number, sequence):
        for index in range(load.cursors[number], len(sequence)):
            if time.monotonic() >= end:
                return
            result = complete(port, *sequence[index], count, extra)
            result.key, load.cursors[number] = (number, index), index + 1
            with load.lock:
                load.results.append(result)

    threads = [threading.Thread(target=client, args=pair, daemon=True) for pair in enumerate(sequences)]
    began = time.monotonic()
    for thread in threads:
        thread.start()
    while any(thread.is_alive() for thread in threads):
        load.peak_rss = max(load.peak_rss, rss(process))
        time.sleep(0.2)
    load.seconds += time.monotonic() - began


def rss(process) -> int:
    """The server's resident memory, its children's included."""
    import psutil

    try:
        return sum(p.memory_info().rss for p in [process, *process.children(recursive=True)])
    except psutil.Error:
        return 0


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def report(name: str, load: Load) -> float:
    """Prints the server's line; returns its output tokens/s."""
    good = [r for r in load.results if r.error is None]
    errors = [r.error for r in load.results if r.error is not None]
    latency = [r.latency for r in good]
    first = [r.first_token for r in good if r.first_token is not None]
    tokens = sum(r.tokens for r in good)
    rate = tokens / load.seconds
    print(
        f"{name}: {len(good)} requests answered, {len(errors)} errors, in {load.seconds:.1f} s; "
        f"latency p50 {statistics.median(latency) if latency else float('nan'):.2f} s, "
        f"p99 {percentile(latency, 0.99):.2f} s; "
        f"time to first token p50 {statistics.median(first) if first else float('nan'):.3f} s, "
        f"p99 {percentile(first, 0.99):.3f} s; {tokens} output tokens, {rate:,.1f} tokens/s; "
        f"peak memory {load.peak_rss / 2**20:,.0f} MiB"
    )
    for error in sorted(set(errors))[:5]:
        print(f"  error: {error[:300]}")
    return rate


def same_text(ours: Load, theirs: Load) -> None:
    """How many of the requests both servers answered got the same greedy text (llama.cpp computes GELU with the
    tanh approximation: logits ~1e-3 apart, so a near tie may go the other way and the texts part there)."""
    answered = {r.key: r.text for r in theirs.results if r.error is None}
    both = [(r.text, answered[r.key]) for r in ours.results if r.error is None and r.key in answered]
    print(f"same greedy text: {sum(a == b for a, b in both)} of the {len(both)} requests both servers answered")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--model", help="a registered base version (models:/NAME@ALIAS); default: random weights")
    parser.add_argument("--threads", type=int, default=1, help="each server's threads (default 1: see the docstring)")
    parser.add_argument("--max-batch-rows", type=int, default=32, help="foundry serve-model's --max-batch-rows")
    parser.add_argument("--rounds", type=int, default=4, help="the servers take turns, each --seconds / ROUNDS")
    args = parser.parse_args()

    from tokenizers import Tokenizer

    from foundry.export.gguf import write_gguf
    from models.tokens import text_only

    with tempfile.TemporaryDirectory(prefix="bench-serving-load-") as scratch:
        folder = Path(scratch)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": str(args.threads)}
        if not args.model:  # a Foundry home of its own for the random version: nothing of the user's is touched
            env |= {"FOUNDRY_HOME": str(folder / "home")}
            for key in ("MLFLOW_TRACKING_URI", "PREFECT_HOME", "PREFECT_API_URL"):
                env.pop(key, None)
                os.environ.pop(key, None)
        os.environ.update(env)
        from foundry.runtime.env import configure_environment

        configure_environment()
        env = dict(os.environ)  # the servers read the same home
        saved, tokenizer_file, source = version(folder, args.model)
        uri = args.model or register(saved, tokenizer_file, folder)
        gguf = write_gguf(saved, tokenizer_file, folder / "gguf", source=uri)
        tokenizer = text_only(Tokenizer.from_file(str(tokenizer_file)))
        count = lambda text: len(tokenizer.encode(text).ids)  # noqa: E731
        sequences = requests(tokenizer, args.clients, args.seconds)
        cfg = saved["model_args"]
        print(
            f"model: {source} ({uri}); {cfg['positions']} positions, {cfg['n_layer']} layers of width "
            f"{cfg['n_embd']}, context {cfg['block_size']}, vocabulary {cfg['vocab_size']}"
        )
        print(
            f"load: {args.clients} clients for {args.seconds:g} s each server in {args.rounds} turns, streamed /v1/completions, greedy, "
            f"prompts {PROMPT_TOKENS[0]}-{PROMPT_TOKENS[1]} tokens, max_tokens {OUTPUT_TOKENS[0]}-{OUTPUT_TOKENS[1]}; "
            f"{args.threads} threads per server, {os.cpu_count()} cores"
        )
        rates, loads = {}, {}
        servers = {
            "foundry serve-model": [sys.executable, "-m", "foundry.cli", "serve-model", uri, "--model-name", "m"]
            + ["--max-batch-rows", str(args.max_batch_rows), "--port"],
            "llama.cpp server": llama_server(gguf, args.threads),
        }
        # llama.cpp's server penalises repeats unless told not to (1.1): greedy means none, as Foundry's
        extras = {"foundry serve-model": {}, "llama.cpp server": {"repeat_penalty": 1.0}}
        started = {}
        try:
            for name, command in servers.items():
                port = free_port()
                started[name] = port, start([*command, str(port)], env, folder / f"{name.split()[0]}.log", port)
                complete(port, "warm up", 4, count, extras[name])
                loads[name] = Load(started[name][1].pid, [0] * args.clients)
            for round_ in range(args.rounds):  # alternated: a change in the machine's load falls on both
                for name in list(servers)[:: 1 if round_ % 2 == 0 else -1]:
                    port = started[name][0]
                    run_load(port, sequences, args.seconds / args.rounds, count, extras[name], loads[name])
        finally:
            for _, server in started.values():
                stop(server)
        for name, load in loads.items():
            rates[name] = report(name, load)
    same_text(loads["foundry serve-model"], loads["llama.cpp server"])
    foundry, llama = rates["foundry serve-model"], rates["llama.cpp server"]
    print(f"serving load: foundry {foundry / llama:.2f}x llama.cpp output tokens/s ({foundry:,.1f} vs {llama:,.1f})")


if __name__ == "__main__":
    main()
