"""Test session wiring: a throwaway $FOUNDRY_HOME and embedded backends, set before Foundry loads."""

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

import pytest

# Hermetic: never talk to a server or a home the developer configured.
for _var in ("MLFLOW_TRACKING_URI", "PREFECT_API_URL", "PREFECT_HOME", "FOUNDRY_HOME"):
    os.environ.pop(_var, None)
SESSION_HOME = Path(tempfile.mkdtemp(prefix="foundry-test-home-"))
os.environ["FOUNDRY_HOME"] = str(SESSION_HOME)

from foundry.runtime.env import configure_environment  # noqa: E402

configure_environment()  # the test process is an entry point too

REPO_ROOT = Path(__file__).resolve().parent.parent
# For every test http server's `serve_forever`: `shutdown()` waits for the loop's next poll, 0.5 s by default,
# which the fast lane paid once per test that served something.
POLL = {"poll_interval": 0.05}


# The two lanes are two folders: tests/fast/ (`make test-fast`: no server, no training beyond a few steps) and
# tests/slow/ (`make test` adds it). The folder is the only record of a test's lane: the hook below marks
# every test under tests/slow/ `slow`, so `-m "not slow"` still picks the fast lane.
FAST_LANE, SLOW_LANE = REPO_ROOT / "tests" / "fast", REPO_ROOT / "tests" / "slow"
# Fixtures that start a server or train through the flows: a test using one, directly or through another
# fixture, belongs to tests/slow/.
SLOW_FIXTURES = {"prefect_harness", "mlflow_server", "moto_s3", "base_model", "aligned_model", "vision_run"}


# The cores this machine lets the tests use, read before an xdist worker keeps to its share (`pytest_configure`).
MACHINE_CORES = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


def pytest_configure(config):
    """An xdist worker keeps to its own share of the cores (one each on two cores): every training it starts then
    takes as many threads as its share holds (foundry.training.trainer.cpu_threads reads the affinity), instead of
    two workers each running as many threads as the machine has cores, which left the cores oversubscribed."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not (worker.startswith("gw") and worker[2:].isdigit()) or len(MACHINE_CORES) < 2:
        return
    index = int(worker[2:]) % count
    share = MACHINE_CORES[index::count] if count <= len(MACHINE_CORES) else [MACHINE_CORES[index % len(MACHINE_CORES)]]
    os.sched_setaffinity(0, share)


def pytest_unconfigure(config):
    """The session's homes go with it: each worker of each run left one under the temporary folder."""
    from homes import remove_template_home

    remove_template_home()
    shutil.rmtree(SESSION_HOME, ignore_errors=True)


@contextlib.contextmanager
def on_every_core():
    """Every core of MACHINE_CORES for this thread and the processes it starts meanwhile: for a test of how work
    is spread over the cores, which its worker's share would hide."""
    share = os.sched_getaffinity(0)
    os.sched_setaffinity(0, MACHINE_CORES)
    try:
        yield
    finally:
        os.sched_setaffinity(0, share)


# The slow lane's modules whose tests use the Prefect server stack (and so the one registered base model): with
# `--dist loadscope` they all go to one xdist worker (below). The collection refuses a test that uses the stack
# in a module missing here.
PREFECT_MODULES = {
    "test_align_flow", "test_credentials_flow", "test_energy", "test_evaluate_flow", "test_finetune", "test_locks_prefect",
    "test_merge_flow", "test_parallel", "test_pipeline", "test_preemption_flows", "test_purge_flow",
    "test_rank_logs_flow", "test_retrain", "test_run_page", "test_search_flow", "test_serving", "test_train_retries",
    "test_validate_tasks", "test_vision_pipeline",
}  # fmt: skip


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist: unknown without it (`-p no:xdist`)
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadscope` sends each module's tests to one worker (its module fixtures are made once), and the
    PREFECT_MODULES together. (`--dist loadgroup` with `xdist_group` marks would say this, but pytest-xdist 3.8
    groups by rewriting a node id that pytest 9 no longer reads: every test went alone.)"""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModulesSharingPrefect(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return "prefect_harness" if Path(module).stem in PREFECT_MODULES else module

    return ModulesSharingPrefect(config, log)


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by mark
def pytest_collection_modifyitems(config, items):
    """Marks the tests under tests/slow/ `slow`, and stops the collection, naming them, at a test in neither lane,
    a test under tests/fast/ that uses a slow fixture, a `slow` mark written by hand (the folder says it), and a
    slow test that uses the Prefect server stack from a module not in PREFECT_MODULES."""
    misplaced = []
    for item in items:
        path = Path(item.path)
        if item.get_closest_marker("slow") is not None:
            misplaced.append(f"{item.nodeid}: marked slow by hand; a test under tests/slow/ is marked for you")
        if path.is_relative_to(SLOW_LANE):
            item.add_marker(pytest.mark.slow)
            if "prefect_harness" in getattr(item, "fixturenames", ()) and path.stem not in PREFECT_MODULES:
                misplaced.append(f"{item.nodeid}: uses the Prefect server stack; add its module to PREFECT_MODULES")
        elif path.is_relative_to(FAST_LANE.parent) and not path.is_relative_to(FAST_LANE):
            misplaced.append(f"{item.nodeid}: in neither lane; move it to tests/fast/ or tests/slow/")
        elif path.is_relative_to(FAST_LANE) and (slow := SLOW_FIXTURES & set(getattr(item, "fixturenames", ()))):
            misplaced.append(
                f"{item.nodeid}: uses {', '.join(sorted(slow))} (a server or a training); move it to tests/slow/"
            )
    if misplaced:
        raise pytest.UsageError("tests in the wrong lane or module list:\n  " + "\n  ".join(misplaced))
    items.sort(key=lambda item: item.get_closest_marker("long") is None)  # stable: otherwise in collection order


@pytest.fixture(autouse=True)
def _sigterm_unarmed(monkeypatch):
    """A command called in-process (`foundry.cli.main(["align", ...])`) arms preemption as its own process would
    (`foundry.runtime.preemption.arm`): each test starts with a fresh, unarmed request, and the SIGTERM handler it
    found is put back, so that no test inherits what another armed in this worker."""
    import signal

    from foundry.runtime import preemption

    handler = signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(preemption, "_REQUEST", preemption._Request())
    yield
    signal.signal(signal.SIGTERM, handler)


@pytest.fixture(scope="session")
def foundry_home() -> Path:
    return SESSION_HOME


@pytest.fixture(scope="session")
def prefect_harness():
    """A real Prefect API server on 127.0.0.1 with a temporary database, for whole-flow tests."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=180):
        yield


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory):
    """A real MLflow tracking server on 127.0.0.1 (its own SQLite store, artifacts served from a folder), one per
    session: each start costs seconds of imports and migrations. Yields (state, running, store): `state["server"]`
    is the current `ops.Server`; `running()` waits until it answers, starting it again on the same port and store
    when a test stopped it; `store` reads the SQLite store directly, server or not. Its artifacts lie under
    `state["home"] / "mlflow" / "served-artifacts"`."""
    import socket

    from mlflow import MlflowClient

    from foundry.ops import servers as ops
    from foundry.runtime.env import mlflow_db_uri

    home = tmp_path_factory.mktemp("mlflow-server")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    state = {"server": ops.start_mlflow(port, home, home / "mlflow.log"), "home": home}

    def running():
        if state["server"].process.poll() is not None:
            _port_released(port)  # its workers may outlive it a moment, holding the port
            state["server"] = ops.start_mlflow(port, home, home / "mlflow.log")
        ops.wait_healthy(state["server"], timeout=180)

    try:
        running()
        yield state, running, MlflowClient(tracking_uri=mlflow_db_uri(home))
    finally:
        ops.stop([state["server"]])


def _port_released(port: int, timeout: float = 60) -> None:
    import socket
    import time

    deadline = time.time() + timeout
    while time.time() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) != 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"something still listens on port {port}")


# Every socket connection and name lookup this test process makes, to prove nothing leaves loopback.
OUTBOUND: list[str] = []
_LOCAL_NAMES = {"localhost", "127.0.0.1", "::1", "0.0.0.0", "", None}


def _audit(event: str, args: tuple) -> None:
    if event == "socket.connect":
        address = args[1]
        host = address[0] if isinstance(address, tuple) else None
        if host is not None and host not in _LOCAL_NAMES and not str(host).startswith("127."):
            OUTBOUND.append(f"connect {address}")
    elif event == "socket.getaddrinfo":
        host = args[0].decode() if isinstance(args[0], bytes) else args[0]
        if host not in _LOCAL_NAMES and not str(host).startswith("127."):
            OUTBOUND.append(f"getaddrinfo {host}")


import sys  # noqa: E402

sys.addaudithook(_audit)


@pytest.fixture(scope="session")
def base_model(prefect_harness):
    """The tiny twin trained, evaluated and registered once per session as `it-gpt` (its champion): the flow
    tests build on it, the serving tests load it. Returns (config, PipelineResult); tests name the version by
    the result's `model_uri`, never by its number. Nothing else registers under `it-gpt`."""
    from flows.train_pipeline import train_pipeline
    from foundry.config import load_config

    # Progress every 0.2 s: on a quiet machine the tiny training ends within tiny.yaml's 2 s, and
    # tests/slow/reports/test_run_page.py wants a report from the middle of it.
    config = load_config(
        REPO_ROOT / "configs" / "tiny.yaml", ["registry.model_name=it-gpt", "train.progress_every_s=0.2"]
    )
    return config, train_pipeline(config=config)


def champion_copy(base, name: str) -> str:
    """The version `base` (a PipelineResult) registered again as `name`'s champion, its lineage tags kept; returns
    the new version. A test that moves a champion works on a name of its own, and `it-gpt` stays as it is."""
    from foundry.registry import versions
    from foundry.runtime import tracking

    original = tracking.client().get_model_version(base.model_name, base.model_version)
    tags = {k: v for k, v in original.tags.items() if not k.startswith(("foundry.", "gate."))}
    return versions.publish(original.source, name, original.run_id, tags, True, f"a copy of {base.model_uri}").version


def run_page(mlflow_run_id: str):
    """The Prefect flow run an MLflow run was made by (its `prefect.flow_run_id` tag) and its artifacts by key,
    through the Prefect client: what the run page shows."""
    from uuid import UUID

    from mlflow import MlflowClient
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    flow_run_id = UUID(MlflowClient().get_run(mlflow_run_id).data.tags["prefect.flow_run_id"])
    with get_client(sync_client=True) as client:
        flow_run = client.read_flow_run(flow_run_id)
        found = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
        )
    return flow_run, {a.key: a for a in found}


def prefect_events(resource_id: str, prefix: str = "foundry.", timeout: float = 60) -> list:
    """The events about `resource_id` in the configured Prefect server's feed, once there is at least one
    (events are sent in the background, so they may arrive a moment after the flow returns)."""
    import time

    from prefect.client.orchestration import get_client
    from prefect.events.filters import EventFilter, EventNameFilter, EventResourceFilter

    wanted = EventFilter(event=EventNameFilter(prefix=[prefix]), resource=EventResourceFilter(id=[resource_id]))
    deadline = time.time() + timeout
    while True:
        with get_client(sync_client=True) as client:
            events = client.read_events(filter=wanted, limit=50).events
        if events or time.time() > deadline:
            return events
        time.sleep(1)


@contextlib.contextmanager
def failing_mlflow_server(monkeypatch, variable: str):
    """`variable` (MLFLOW_TRACKING_URI or MLFLOW_REGISTRY_URI) set to a server on loopback that answers every
    request 503 (retried once, then given up)."""
    import http.server
    import threading

    class Unavailable(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _fail(self):
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_POST = do_PATCH = do_DELETE = _fail

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Unavailable)
    threading.Thread(target=server.serve_forever, kwargs=POLL, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    with monkeypatch.context() as patched:  # the variables go back when the server goes
        patched.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
        patched.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "0")
        patched.setenv(variable, url)
        try:
            if variable == "MLFLOW_TRACKING_URI":
                with tracking_uri(patched, url):
                    yield
            else:
                yield
        finally:
            server.shutdown()
            server.server_close()


@contextlib.contextmanager
def tracking_uri(monkeypatch, url: str):
    """MLflow's tracking URI set to `url` in this process, and put back after. The variable alone is not
    enough once a training ran in this process: Lightning's MLFlowLogger sets MLflow's process-wide URI,
    which then wins over the variable."""
    import mlflow.tracking._tracking_service.utils as tracking_utils

    saved = tracking_utils._tracking_uri
    monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
    tracking_utils._tracking_uri = url
    try:
        yield
    finally:
        tracking_utils._tracking_uri = saved


@pytest.fixture(scope="session")
def instruction_set(tmp_path_factory) -> dict[str, Path]:
    """The generated instruction set, small: sft/ and dpo/ records, eval/ held-out sets (foundry.align.instructions)."""
    from foundry.align.instructions import write_instruction_set

    return write_instruction_set(tmp_path_factory.mktemp("instructions"), train=60, test=10, pairs=30)


@pytest.fixture(scope="session")
def aligned_model(base_model, instruction_set):
    """The tiny base (`base_model`'s version of `it-gpt`) instruction-tuned once per session by the align flow (configs/tiny_align.yaml)
    and registered as `it-chat`: the alignment tests build on it, the serving tests load it. Returns (config, AlignResult)."""
    from flows.align import align
    from foundry.config import load_config

    overrides = ["align.model_name=it-chat", f"data.source={instruction_set['sft'].parent}"]
    overrides.append("align.replay_fraction=0.25")  # two of the 8 rows replay the base's pretraining text
    overrides.append("evaluation.max_regression=10")  # one gate outcome: a lower response loss passes
    config = load_config(REPO_ROOT / "configs" / "tiny_align.yaml", overrides)
    return config, align(model_uri=base_model[1].model_uri, config=config)


@pytest.fixture(scope="session")
def vision_run(prefect_harness):
    """The vision workload's tiny twin (configs/vision-tiny.yaml) through the train pipeline once per session, trained
    on 2 ranks (DDP on CPU) and registered as `it-vision` (its champion): tests/slow/vision/test_vision_pipeline.py
    builds on it, tests/slow/serving/test_serving.py serves it. Returns (config, PipelineResult); tests name the
    version by the result's `model_uri`. Validation at step 30 of 40: the last steps leave each rank BatchNorm
    statistics of its own, which the replicas' equal digests then show reconciled."""
    from flows.train_pipeline import train_pipeline
    from foundry.config import load_config

    overrides = ["registry.model_name=it-vision", "train.devices=2", "train.val_every_n_steps=30"]
    config = load_config(REPO_ROOT / "configs" / "vision-tiny.yaml", overrides)
    return config, train_pipeline(config=config)


@pytest.fixture(scope="session")
def tiny_config():
    from foundry.config import load_config

    return load_config(REPO_ROOT / "configs" / "tiny.yaml")


@pytest.fixture(scope="session")
def chat_tokenizer(tiny_dataset, tmp_path_factory) -> Path:
    """The tiny dataset's tokenizer with the chat template's markers added, saved as a file."""
    from tokenizers import Tokenizer

    from models.chat import ChatTemplate, add_chat_tokens

    tokenizer = Tokenizer.from_file(str(tiny_dataset / "tokenizer.json"))
    add_chat_tokens(tokenizer, ChatTemplate())
    path = tmp_path_factory.mktemp("chat-tokenizer") / "tokenizer.json"
    tokenizer.save(str(path))
    return path


@pytest.fixture(scope="session")
def tiny_dataset(tiny_config, tmp_path_factory) -> Path:
    """The tiny twin's prepared dataset (stdlib://email), built once per session."""
    from foundry.core.preparing import Preparing
    from foundry.data.acquire import acquire_source
    from foundry.pretrain.prepare import prepare

    root = tmp_path_factory.mktemp("tiny-dataset")
    manifest = acquire_source(tiny_config.data, root / "source_manifest.json")
    prepare(Preparing(manifest, tiny_config, root / "prepared"))
    return root / "prepared"


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A $FOUNDRY_HOME of the test's own: the source modules use it for every test
    (`pytestmark = pytest.mark.usefixtures("home")`), so no test reads another's downloaded copies."""
    monkeypatch.setenv("FOUNDRY_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture(scope="session")
def versioned_once(tiny_config, tiny_dataset, tmp_path_factory):
    """The tiny dataset committed and pushed from one home, once: (DataVersion, that home, a Snapshot of it)."""
    import shutil

    from helpers_snapshots import Snapshot

    from foundry.core.contracts import SourceManifest
    from foundry.data.versioning import version_dataset

    root = tmp_path_factory.mktemp("versioned")
    home, staged = root / "home-a", root / "staged"
    shutil.copytree(tiny_dataset, staged)  # the session's tiny dataset stays as it is
    source_manifest = SourceManifest.read(tiny_dataset.parent / "source_manifest.json")
    return version_dataset(tiny_config, staged, source_manifest, home), home, Snapshot(root / "kept", home)


@pytest.fixture
def versioned(versioned_once, tmp_path, monkeypatch):
    """The tiny dataset committed and pushed from one home: (DataVersion, that home). The home (workspace, cache,
    remote) is put back as it was committed before each test, at the path DVC recorded."""
    data, home, snapshot = versioned_once
    snapshot.restore()
    monkeypatch.setenv("DVC_SITE_CACHE_DIR", str(tmp_path / "dvc-site-cache"))  # DVC keys its index by the path
    return data, home


@pytest.fixture(scope="session")
def moto_s3():
    """A real S3 API (moto_server) on 127.0.0.1; yields its endpoint URL."""
    import socket
    import subprocess
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = Path(sys.executable).parent / "moto_server"
    proc = subprocess.Popen(
        [str(server), "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.time() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.time() > deadline or proc.poll() is not None:
                proc.kill()
                raise RuntimeError("moto_server did not start") from None
            time.sleep(0.2)
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture()
def s3_env(moto_s3, monkeypatch, tmp_path):
    """Standard AWS variables pointing at moto; returns a boto3 client for setting up buckets."""
    import boto3

    aws_test_env(monkeypatch, tmp_path, moto_s3)
    return boto3.client("s3", endpoint_url=moto_s3)


def aws_test_env(monkeypatch, tmp_path: Path, endpoint: str) -> None:
    """The standard AWS variables pointing at `endpoint` with moto's test credentials."""
    for key, value in {
        "AWS_ENDPOINT_URL_S3": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        # The developer's own profiles must not leak in (botocore wants a regular file here).
        "AWS_CONFIG_FILE": str(tmp_path / "aws-empty"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "aws-empty"),
    }.items():
        monkeypatch.setenv(key, value)
    (tmp_path / "aws-empty").touch()


@contextlib.contextmanager
def serving(folder: Path):
    """`folder` (created) served over http on 127.0.0.1 by a real `http.server`; yields (folder, base URL)."""
    import functools
    import http.server
    import threading

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    folder.mkdir()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, kwargs=POLL, daemon=True)
    thread.start()
    try:
        yield folder, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def http_folder(tmp_path):
    """A folder served over http on 127.0.0.1 (a real `http.server`); yields (folder, base URL)."""
    with serving(tmp_path / "www") as served:
        yield served
