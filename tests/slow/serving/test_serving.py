"""The registered model stands alone: it loads and generates in a fresh virtualenv holding only its own
logged requirements (installed offline from the wheelhouse `make test` gathers), from a folder outside
the checkout, through `mlflow.pyfunc.load_model`, `mlflow models predict` and `mlflow models serve` over
HTTP (a bad request gets HTTP 400 naming its field); the vision twin's image classifier is served the same way
from the same virtualenv. Versions registered before the code moved still load,
through the shim at their old import path. `foundry serve-model` answers the OpenAI SDK."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.error import HTTPError
from urllib.request import Request, urlopen

import pandas as pd
import pytest
from conftest import REPO_ROOT as REPO

WHEELHOUSE = Path(sys.executable).parent.parent / "wheelhouse"
LEGACY = REPO / "tests" / "fixtures" / "model_registered_at_e727f4a"
PROMPTS = ["def parse(", "import "]
PARAMS = {"max_new_tokens": 8}


def run(command: list, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(command, capture_output=True, text=True, **kwargs)
    assert result.returncode == 0, f"{command[:3]}: {result.stdout[-2000:]}{result.stderr[-3000:]}"
    return result


@pytest.fixture(scope="module")
def fresh_venv(base_model, tmp_path_factory):
    """A virtualenv with only the champion's logged requirements, installed with no package index."""
    import mlflow

    assert (WHEELHOUSE / ".complete").is_file(), (
        f"no wheelhouse at {WHEELHOUSE}: `make test` gathers it (offline installs need it)"
    )
    model_dir = Path(
        mlflow.artifacts.download_artifacts("models:/it-gpt@champion", dst_path=str(tmp_path_factory.mktemp("m")))
    )
    requirements = model_dir / "requirements.txt"
    venv = tempfile.mkdtemp(prefix="served-venv-")
    try:
        # No pip inside (ensurepip writes a thousand files): this interpreter's pip installs into it, by --python.
        run([sys.executable, "-m", "venv", "--without-pip", venv], timeout=300)
        python = Path(venv) / "bin" / "python"
        install_offline(python, requirements)
        yield python, requirements.read_text().split()
    finally:
        # Over a gigabyte of files (torch, MLflow's dependencies): deleting them took a minute of the lane on a
        # busy disk, with nothing to compute. They go in the background, beside the next tests.
        subprocess.Popen(
            ["rm", "-rf", venv], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )


def install_offline(python: Path, requirements: Path) -> None:
    """`requirements` installed into `python`'s virtualenv from the wheelhouse alone: this machine's pip settings
    (local wheel folders, extra indexes) are left out."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")} | {"PIP_CONFIG_FILE": os.devnull}
    command = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-index"]
    command += ["--find-links", str(WHEELHOUSE)]
    run([*command, "--no-compile", "-r", str(requirements)], timeout=900, env=env)


def _outside_env() -> dict[str, str]:
    """What a user's shell would have: the registry's address and telemetry off; no Foundry, no checkout."""
    return {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/tmp"),
        "MLFLOW_TRACKING_URI": os.environ["MLFLOW_TRACKING_URI"],
        "DO_NOT_TRACK": "true",
        "MLFLOW_DISABLE_TELEMETRY": "true",
    }


def parsed(lines) -> set:
    """Requirement lines as (name, specifier) pairs: MLflow writes a specifier in its own order."""
    from packaging.requirements import Requirement

    return {(r.name, r.specifier) for r in map(Requirement, lines)}


def test_logged_requirements_are_the_models_own(fresh_venv):
    from packaging.requirements import Requirement

    _, logged = fresh_venv
    assert parsed(logged) == parsed((REPO / "foundry" / "serving" / "requirements.txt").read_text().split())
    assert {r.name for r in map(Requirement, logged)} == {"mlflow", "torch", "tokenizers", "pandas", "numpy"}


def test_the_champion_loads_and_generates_in_a_fresh_venv_outside_the_checkout(fresh_venv, base_model, tmp_path):
    import mlflow

    python, _ = fresh_venv
    program = f"""
import json, pandas as pd, mlflow
try:
    import foundry
    raise SystemExit("foundry is importable: the test does not stand outside the checkout")
except ImportError:
    pass
model = mlflow.pyfunc.load_model("models:/it-gpt@champion")
out = model.predict(pd.DataFrame({{"prompt": {PROMPTS!r}}}), params={PARAMS!r})
print(json.dumps(list(out["completion"])))
"""
    result = run([str(python), "-c", program], cwd=tmp_path, env=_outside_env(), timeout=600)
    completions = json.loads(result.stdout.strip().splitlines()[-1])
    here = mlflow.pyfunc.load_model("models:/it-gpt@champion").predict(pd.DataFrame({"prompt": PROMPTS}), params=PARAMS)
    assert completions == list(here["completion"]) and all(completions)


def test_mlflow_models_predict_serves_it_the_same_way(fresh_venv, tmp_path):
    import mlflow

    python, _ = fresh_venv
    frame = {"dataframe_split": {"columns": ["prompt"], "data": [[p] for p in PROMPTS]}, "params": PARAMS}
    (tmp_path / "input.json").write_text(json.dumps(frame))
    mlflow_cli = python.parent / "mlflow"
    run(
        [
            str(mlflow_cli),
            "models",
            "predict",
            "-m",
            "models:/it-gpt@champion",
            "-i",
            "input.json",
            "-t",
            "json",
            "-o",
            "output.json",
            "--env-manager",
            "local",
        ],
        cwd=tmp_path,
        env=_outside_env(),
        timeout=600,
    )
    served = [row["completion"] for row in json.loads((tmp_path / "output.json").read_text())["predictions"]]
    here = mlflow.pyfunc.load_model("models:/it-gpt@champion").predict(pd.DataFrame({"prompt": PROMPTS}), params=PARAMS)
    assert served == list(here["completion"]) and all(served)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def running(command: list[str], port: int, env: dict[str, str], folder: Path):
    """The server `command` started in `folder`, once it answers /ping on the loopback `port`; yields its URL.
    Stopped, with its whole process group, when the block ends."""
    log = folder / "serve.log"
    with log.open("w") as out:
        server = subprocess.Popen(
            command,
            cwd=folder,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: uvicorn and its worker end with it
        )
    try:
        url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 300
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


@contextlib.contextmanager
def served(python: Path, model_uri: str, folder: Path):
    """`mlflow models serve` of the version from the fresh virtualenv on a free loopback port; yields its URL.
    MLflow starts `uvicorn` by name: the virtualenv's `bin/` goes first on PATH, as an activated one would."""
    port = free_port()
    env = _outside_env() | {"PATH": f"{python.parent}{os.pathsep}{os.environ['PATH']}"}
    command = [str(python.parent / "mlflow"), "models", "serve", "-m", model_uri, "--env-manager", "local"]
    with running([*command, "-h", "127.0.0.1", "-p", str(port), "-w", "1"], port, env, folder) as url:
        yield url


def ask(url: str, body: dict, path: str = "/invocations") -> tuple[int, dict | str]:
    request = Request(f"{url}{path}", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urlopen(request, timeout=300) as response:
            return response.status, json.loads(response.read())
    except HTTPError as error:
        text = error.read().decode()
        return error.code, json.loads(text) if text.startswith("{") else text


def test_mlflow_models_serve_answers_over_http_and_refuses_bad_requests_with_400(fresh_venv, tmp_path):
    """The champion served from the fresh virtualenv: a good request is answered as in this process; a bad
    one gets HTTP 400 naming its field, the limits being those the version was logged with (the defaults)."""
    import mlflow

    from models.request_limits import LIMITS

    python, _ = fresh_venv
    with served(python, "models:/it-gpt@champion", tmp_path) as url:
        status, answer = ask(url, {"dataframe_records": [{"prompt": p} for p in PROMPTS], "params": PARAMS})
        one = [{"prompt": "def "}]
        refusals = {
            "rows: no rows with a `prompt` or `messages`": {"dataframe_records": [{"text": "def "}]},
            "row 1: needs a prompt": {"dataframe_records": [{"prompt": "def "}, {"text": "def "}]},
            "messages hold no user turn": {"dataframe_records": [{"messages": [{"role": "system", "content": "x"}]}]},
            "params.max_new_tokens = -5": {"dataframe_records": one, "params": {"max_new_tokens": -5}},
            f"params.max_new_tokens = {LIMITS['max_new_tokens'] + 1}": {
                "dataframe_records": one,
                "params": {"max_new_tokens": LIMITS["max_new_tokens"] + 1},
            },
            f"a request holds 1 to {LIMITS['max_rows']}": {"dataframe_records": one * (LIMITS["max_rows"] + 1)},
        }
        refused = {fragment: ask(url, body) for fragment, body in refusals.items()}
    here = mlflow.pyfunc.load_model("models:/it-gpt@champion").predict(pd.DataFrame({"prompt": PROMPTS}), params=PARAMS)
    assert status == 200 and [row["completion"] for row in answer["predictions"]] == list(here["completion"])
    for fragment, (code, body) in refused.items():
        assert code == 400 and body["error_code"] == "INVALID_PARAMETER_VALUE", (fragment, code, body)
        assert fragment in body["message"], (fragment, body)


def test_the_image_classifier_served_over_http_labels_a_png_and_refuses_a_bad_image_with_400(
    fresh_venv, vision_run, tmp_path
):
    """The tiny vision twin's classifier (tests/conftest.py `vision_run`) served from the same virtualenv once its
    own logged requirements (Pillow besides the text model's, no tokenizers) installed there offline: a base64 PNG
    gets the label and probabilities it gets in this process; bytes that are not an image get HTTP 400 naming the
    row and the problem."""
    import base64

    import mlflow
    from sklearn.datasets import load_digits

    from foundry.vision.package import vision_requirements

    _, result = vision_run
    python, _ = fresh_venv
    model_dir = Path(mlflow.artifacts.download_artifacts(result.model_uri, dst_path=str(tmp_path / "model")))
    requirements = model_dir / "requirements.txt"
    logged = parsed(requirements.read_text().split())
    assert logged == parsed(vision_requirements()) and "pillow" in {name for name, _ in logged}
    install_offline(python, requirements)
    png = _png(load_digits().images[0] * 255 / 16)
    with served(python, result.model_uri, tmp_path) as url:
        status, answer = ask(url, {"dataframe_records": [{"image": base64.b64encode(png).decode()}]})
        refused = ask(url, {"dataframe_records": [{"image": base64.b64encode(b"not an image").decode()}]})
    here = mlflow.pyfunc.load_model(result.model_uri).predict(pd.DataFrame({"image": [png]}))
    assert status == 200, answer
    [prediction] = answer["predictions"]
    assert prediction["label"] == here.label[0] and prediction["label"] in [str(d) for d in range(10)]
    assert prediction["probabilities"] == pytest.approx(here.probabilities[0], abs=1e-6)
    assert prediction["probability"] == pytest.approx(max(prediction["probabilities"].values()), abs=1e-6)
    code, body = refused
    assert code == 400 and body["error_code"] == "INVALID_PARAMETER_VALUE", (code, body)
    assert "row 0: image: not a JPEG, PNG, WEBP, BMP image Pillow can decode" in body["message"], body


def _png(pixels) -> bytes:
    """An 8x8 gray PNG of 0-255 `pixels`."""
    import io

    import numpy as np
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(np.asarray(pixels).astype(np.uint8), mode="L").save(out, format="PNG")
    return out.getvalue()


CHATS = [
    [{"role": "user", "content": "Add: 2 + 3"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Sort ascending: 9, 4"}],
]


def test_an_aligned_version_answers_a_chat_offline_in_a_fresh_process(fresh_venv, aligned_model, tmp_path):
    """The chat template travels inside the version: outside the checkout it renders the messages itself."""
    import mlflow

    _, aligned = aligned_model
    python, _ = fresh_venv
    program = f"""
import json, pandas as pd, mlflow
try:
    import foundry
    raise SystemExit("foundry is importable: the test does not stand outside the checkout")
except ImportError:
    pass
model = mlflow.pyfunc.load_model({aligned.model_uri!r})
assert model.metadata.get_input_schema().input_names()[:2] == ["prompt", "messages"]
out = model.predict(pd.DataFrame({{"messages": {CHATS!r}}}), params={PARAMS!r})
print(json.dumps(list(out["completion"])))
"""
    result = run([str(python), "-c", program], cwd=tmp_path, env=_outside_env(), timeout=600)
    replies = json.loads(result.stdout.strip().splitlines()[-1])
    here = mlflow.pyfunc.load_model(aligned.model_uri).predict(pd.DataFrame({"messages": CHATS}), params=PARAMS)
    assert replies == list(here["completion"]) and len(replies) == len(CHATS)


def test_an_aligned_version_served_over_http_answers_a_chat_and_the_chat_completions_shape(
    fresh_venv, aligned_model, tmp_path
):
    """The aligned version served from the fresh virtualenv: Foundry's chat rows as in this process; a
    chat-completions body (what an OpenAI client sends, posted to /invocations) in that shape, its reply the
    same chat's; the path an OpenAI client would post to by itself is not served (404: `foundry serve-model`
    serves it, the next test)."""
    import mlflow

    _, aligned = aligned_model
    python, _ = fresh_venv
    greedy = {"max_new_tokens": 8, "temperature": 0}
    chat = {"model": "it-chat", "messages": CHATS[1], "max_tokens": 8, "temperature": 0}
    with served(python, aligned.model_uri, tmp_path) as url:
        rows = ask(url, {"dataframe_records": [{"messages": c} for c in CHATS], "params": greedy})
        completion = ask(url, chat)
        openai_path = ask(url, chat, "/chat/completions")
        too_long = ask(url, {**chat, "max_tokens": 100_000})
    here = mlflow.pyfunc.load_model(aligned.model_uri).predict(pd.DataFrame({"messages": CHATS}), params=greedy)
    assert rows[0] == 200 and [row["completion"] for row in rows[1]["predictions"]] == list(here["completion"])
    status, answer = completion
    assert status == 200 and answer["object"] == "chat.completion", answer
    [choice] = answer["choices"]
    assert choice["message"] == {"role": "assistant", "content": here["completion"][1]}
    assert choice["finish_reason"] in ("stop", "length") and answer["usage"]["completion_tokens"] <= 8
    assert choice["finish_reason"] == "stop" or answer["usage"]["completion_tokens"] == 8
    assert openai_path[0] == 404
    assert too_long[0] == 400 and "max_tokens = 100000: must be between 1 and" in too_long[1]["message"]


NETAUDIT = REPO / "tests" / "netaudit"  # sitecustomize.py: a process's attempts beyond loopback, logged
_REACHED_OUT: list[str] | None = None  # while `reaching_out` listens: this process's attempts beyond loopback


@contextlib.contextmanager
def reaching_out():
    """What this process tries to reach beyond loopback inside the block, by tests/netaudit's rule. An audit
    hook cannot be removed: one is added on first use, and records nothing outside a block."""
    global _REACHED_OUT
    spec = importlib.util.spec_from_file_location("netaudit_rule", NETAUDIT / "sitecustomize.py")
    rule = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rule)  # without FOUNDRY_NET_AUDIT it only defines its functions

    def hook(event: str, args: tuple) -> None:
        if _REACHED_OUT is None or not event.startswith("socket."):
            return
        host = args[1][0] if event in rule._ADDRESS_EVENTS and len(args) > 1 and isinstance(args[1], tuple) else None
        host = args[0] if event in rule._NAME_EVENTS and args else host
        if not rule._is_local(host):
            _REACHED_OUT.append(f"{event} {host!r}")

    if not getattr(reaching_out, "hooked", False):
        sys.addaudithook(hook)
        reaching_out.hooked = True
    _REACHED_OUT = reached = []
    try:
        yield reached
    finally:
        _REACHED_OUT = None


def test_an_openai_client_gets_from_foundry_serve_model_what_invocations_answers(aligned_model, tmp_path):
    """`foundry serve-model` on a loopback port: the OpenAI SDK (base_url .../v1) lists the one model and gets the
    reply /invocations gives the same chat; an over-limit max_tokens is its BadRequestError naming the field.
    Neither the SDK here nor the server (tests/netaudit's hook in it) tries to reach beyond loopback."""
    import openai

    _, aligned = aligned_model
    port, audit = free_port(), tmp_path / "audit.jsonl"
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(NETAUDIT), str(REPO)]), "FOUNDRY_NET_AUDIT": str(audit)}
    command = [sys.executable, "-m", "foundry.cli", "serve-model", aligned.model_uri, "--port", str(port)]
    greedy = {"messages": CHATS[1], "max_tokens": 8, "temperature": 0}
    with running(command, port, env, tmp_path) as url, reaching_out() as reached:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)
        [listed] = client.models.list().data
        reply = client.chat.completions.create(model=listed.id, **greedy)
        invoked = ask(url, {"model": listed.id, **greedy})
        with pytest.raises(openai.BadRequestError) as too_long:
            client.chat.completions.create(model=listed.id, **{**greedy, "max_tokens": 100_000})
    compared = {"choices", "usage"}  # the id and the time differ between two answers
    expected = openai.types.chat.ChatCompletion(**invoked[1]).model_dump(include=compared)
    assert listed.id == aligned.model_uri and invoked[0] == 200 and reply.model == listed.id
    assert reply.model_dump(include=compared) == expected and reply.choices[0].message.content
    assert too_long.value.status_code == 400 and too_long.value.param == "max_tokens"
    assert too_long.value.body["message"].startswith("max_tokens = 100000: must be between 1 and")
    events = [json.loads(line)["event"] for line in audit.read_text().splitlines()]
    assert reached == [] and events == ["started"]  # the server's one process started, and tried nothing more


@pytest.fixture(scope="module")
def legacy_version(tmp_path_factory) -> str:
    """A version logged by the code at e727f4a (`tasks.registry.log_model`), registered here as it was then:
    its pickle names `tasks.pyfunc_model` and it carries no code."""
    from foundry.registry import versions
    from foundry.runtime import tracking

    assert b"tasks.pyfunc_model" in (LEGACY / "python_model.pkl").read_bytes()
    model_dir = shutil.copytree(LEGACY, tmp_path_factory.mktemp("legacy") / "model")
    run_id = tracking.client().create_run(tracking.experiment_id("foundry"), run_name="before the move").info.run_id
    version = versions.register(str(model_dir), "legacy-gpt", run_id, {"data_version": "legacy"})
    return f"models:/legacy-gpt/{version}"


def _legacy_completions(uri: str) -> list[str]:
    import mlflow

    out = mlflow.pyfunc.load_model(uri).predict(pd.DataFrame({"prompt": PROMPTS}), params=PARAMS)
    return list(out["completion"])


def test_a_version_registered_before_the_move_still_loads_in_the_checkout(legacy_version):
    """Through the shim at its old import path, `tasks/pyfunc_model.py`."""
    completions = _legacy_completions(legacy_version)
    assert len(completions) == len(PROMPTS) and any(completions)


def test_reregistering_it_gives_a_version_that_loads_outside_the_checkout(legacy_version, fresh_venv, tmp_path):
    from foundry.cli import main

    assert main(["reregister", legacy_version]) == 0
    again = "models:/legacy-gpt/" + str(int(legacy_version.rsplit("/", 1)[1]) + 1)
    python, _ = fresh_venv
    program = f"""
import json, pandas as pd, mlflow
model = mlflow.pyfunc.load_model({again!r})
print(json.dumps(list(model.predict(pd.DataFrame({{"prompt": {PROMPTS!r}}}), params={PARAMS!r})["completion"])))
"""
    result = run([str(python), "-c", program], cwd=tmp_path, env=_outside_env(), timeout=600)
    assert json.loads(result.stdout.strip().splitlines()[-1]) == _legacy_completions(legacy_version)
