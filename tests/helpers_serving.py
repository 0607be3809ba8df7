"""The served model (#30 point 6: tests/fast/serving/test_serving_bounds.py, tests/fast/test_security_review.py)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import torch
from helpers_tokenizers import tiny_tokenizer

from models.chat import ChatTemplate
from models.gpt import GPT, GPTConfig


def tiny_served_files(root: Path, seed: int = 0) -> tuple[Path, Path, Path]:
    """A tiny model aligned (`model.pt`, its chat template inside) and not (`base.pt`), and `tokenizer.json`; its
    weights drawn with `seed`."""
    tokenizer = tiny_tokenizer(root / "tokenizer.json")
    torch.manual_seed(seed)
    model = GPT(GPTConfig(vocab_size=tokenizer.get_vocab_size(), block_size=32, n_layer=2, n_head=2, n_embd=32))
    saved = {"model_args": model.config.to_dict(), "state_dict": model.state_dict()}
    torch.save({**saved, "chat_template": ChatTemplate().to_dict()}, root / "model.pt")
    torch.save(saved, root / "base.pt")
    return root / "model.pt", root / "tokenizer.json", root / "base.pt"


@contextlib.contextmanager
def served(model, model_id: str, max_batch_rows: int | None = None) -> Iterator[str]:
    """`model` (a loaded PyFuncModel) served on a free loopback port by `foundry serve-model`'s app (uvicorn running
    `build_app`, as `foundry.serving.http.serve` does, batches of up to `max_batch_rows` rows), in a thread of this
    process; yields its URL."""
    import pytest
    import uvicorn
    from mlflow.environment_variables import _MLFLOW_IS_IN_SERVING_ENVIRONMENT

    from foundry.serving.http import build_app

    port = free_port()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(_MLFLOW_IS_IN_SERVING_ENVIRONMENT.name, "false")  # MLflow's init sets it; put back after
        server = uvicorn.Server(
            uvicorn.Config(build_app(model, model_id, max_batch_rows), port=port, log_level="warning")
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 60
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.05)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.should_exit = True
            thread.join(30)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def serve_model_process(model_uri: str, folder: Path) -> Iterator[str]:
    """`foundry serve-model MODEL_URI` as a user runs it, in its own process (this session's registry, from the
    environment), once it answers /ping; yields its URL. Stopped with its process group when the block ends."""
    from urllib.request import urlopen

    port, log = free_port(), folder / "serve.log"
    command = [sys.executable, "-m", "foundry.cli", "serve-model", model_uri, "--port", str(port)]
    with log.open("w") as out:
        server = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 120
        while True:
            try:
                with urlopen(f"{url}/ping", timeout=5):
                    break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.25)
        yield url
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
