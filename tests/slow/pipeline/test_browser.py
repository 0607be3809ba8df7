"""Both UIs as a person uses them, in a real headless browser (Playwright driving Debian's Chromium).

`foundry up` and `foundry serve` run on 127.0.0.1 in a throwaway $FOUNDRY_HOME. In the Prefect UI: the
`train_pipeline/train` deployment, its form (the tiny config, train.max_steps changed), Run, the run page
until it completes, its Artifacts tab with the summary. In the MLflow UI: the registered model with the new
version's aliases, the version's model card, the run's metrics. Each page is saved as a screenshot under
tests/output/browser/. Under CI a missing browser fails the test; elsewhere it skips.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from conftest import REPO_ROOT
from homes import seeded_home

SHOTS = REPO_ROOT / "tests" / "output" / "browser"
CHROMIUM = Path("/usr/bin/chromium")
MODEL = "foundry-gpt-tiny"  # configs/tiny.yaml's registry.model_name
STEPS = 12  # what the form changes train.max_steps to
# An element of the Prefect UI's parameter form holding one property: its label and its input.
PROPERTY = "xpath=ancestor::div[contains(concat(' ', normalize-space(@class), ' '), ' schema-form-property ')][1]"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get_json(url: str, body: dict | None = None) -> dict | list:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    for attempt in range(5):
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as error:
            # A busy server on 2 cores once answered a read with 503; a read is safe to ask again, a write is not.
            if error.code != 503 or body is not None or attempt == 4:
                raise
            time.sleep(1)


def _wait(what: str, check, timeout: float, every: float = 1.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            result = check()
        except OSError:
            result = None
        if result:
            return result
        time.sleep(every)
    raise TimeoutError(f"{what} within {timeout:.0f} s")


@pytest.fixture(scope="module")
def chromium():
    """Playwright's Chromium on Debian's browser; CI installs it (.ci/run), so there its absence is a failure."""
    missing = []
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing.append("the playwright package (pip install -e '.[dev]')")
    if not CHROMIUM.is_file():
        missing.append(f"{CHROMIUM} (apt-get install -y chromium)")
    if missing:
        message = "the browser test needs " + " and ".join(missing)
        pytest.fail(message) if os.environ.get("CI") else pytest.skip(message)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu"])
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        context.route("**/*", _loopback_only)
        yield context
        browser.close()


OUTSIDE: list[str] = []  # requests the pages made beyond 127.0.0.1 (refused)


def _beyond_loopback(url: str) -> bool:
    return not (urlsplit(url).hostname in ("127.0.0.1", "localhost") or url.startswith(("data:", "blob:")))


def _loopback_only(route) -> None:
    url = route.request.url
    if _beyond_loopback(url):
        OUTSIDE.append(url)
        route.abort()
    else:
        route.continue_()


@pytest.fixture(scope="module")
def servers(chromium, tmp_path_factory):
    """`foundry up` and `foundry serve --config configs/tiny.yaml`; yields (prefect URL, mlflow URL)."""
    tmp = tmp_path_factory.mktemp("ui")
    prefect, mlflow = _free_port(), _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_", "DVC_"))}
    env["FOUNDRY_HOME"] = str(seeded_home(tmp / "home"))
    cli = [sys.executable, "-m", "foundry.cli"]
    # Ctrl-C stops them, even where this test runs in a background job (which ignores SIGINT, and so would they).
    interruptible = {"preexec_fn": lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)}
    logs = {name: open(tmp / f"{name}.log", "w") for name in ("up", "serve")}
    up = subprocess.Popen(
        cli + ["up", "--prefect-port", str(prefect), "--mlflow-port", str(mlflow)],
        env=env,
        cwd=tmp,
        stdout=logs["up"],
        stderr=subprocess.STDOUT,
        **interruptible,
    )
    urls = f"http://127.0.0.1:{prefect}", f"http://127.0.0.1:{mlflow}"
    serve = None
    try:
        _wait("foundry up did not print its URLs", lambda: "Ctrl-C" in (tmp / "up.log").read_text(), 240)
        served = {
            **env,
            "PREFECT_API_URL": f"{urls[0]}/api",
            "MLFLOW_TRACKING_URI": urls[1],
            "PREFECT_RUNNER_POLL_FREQUENCY": "1",  # a run is picked up within a second of its creation
        }
        serve = subprocess.Popen(
            cli + ["serve", "--config", str(REPO_ROOT / "configs" / "tiny.yaml")],
            env=served,
            cwd=tmp,
            stdout=logs["serve"],
            stderr=subprocess.STDOUT,
            **interruptible,
        )
        _wait("the train deployment was not registered", lambda: _deployment(urls[0]), 240)
        yield urls
    finally:
        for process in (serve, up):  # up stops both servers on Ctrl-C
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGINT)
                try:
                    process.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    process.kill()
        for log in logs.values():
            log.close()


def _deployment(prefect: str) -> dict:
    return _get_json(f"{prefect}/api/deployments/name/train_pipeline/train")


def _flow_run(prefect: str, flow_run_id: str) -> dict:
    return _get_json(f"{prefect}/api/flow_runs/{flow_run_id}")


def expect(locator):
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(locator)


def _shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


@pytest.fixture(scope="module")
def ui_run(chromium, servers):
    """The train deployment run from its form in the Prefect UI; yields (page, flow run as the API has it)."""
    prefect, _ = servers
    page = chromium.new_page()
    page.set_default_timeout(60_000)
    said: list[str] = []  # the page's console errors and failed requests, for a failure's message
    page.on("console", lambda m: m.type in ("error", "warning") and said.append(f"console {m.type}: {m.text}"))
    page.on("response", lambda r: r.status >= 400 and said.append(f"{r.status} {r.request.method} {r.url}"))
    page.on("requestfailed", lambda r: said.append(f"failed {r.method} {r.url}: {r.failure}"))
    page.goto(f"{prefect}/deployments")
    _shot(page, "1-prefect-deployments")
    page.get_by_role("link", name="train", exact=True).click()
    page.get_by_role("button", name="Run", exact=True).click()
    page.get_by_text("Custom run").click()
    label = page.get_by_text("Max Steps (Optional)", exact=True).first  # train's; retrain's comes later
    box = label.locator(PROPERTY).locator("input").first
    assert box.input_value() == "150"  # the served config, configs/tiny.yaml
    box.fill(str(STEPS))
    review = page.get_by_text("Auto Promote (Optional)", exact=True).first.locator(PROPERTY).get_by_role("switch")
    review.click()  # review mode: the new version waits as challenger for a person to promote it
    expect(review).to_have_attribute("aria-checked", "false")
    _shot(page, "2-prefect-run-form")
    page.get_by_role("button", name="Submit").click()
    flow_run_id = _created_run(page, prefect, said)
    page.goto(f"{prefect}/runs/flow-run/{flow_run_id}")
    done = _wait(
        "the flow run did not finish",
        lambda: (run := _flow_run(prefect, flow_run_id))["state"]["type"] in ("COMPLETED", "FAILED", "CRASHED") and run,
        timeout=480,
        every=0.5,
    )
    yield page, done
    page.close()


def _run_deployment(prefect: str, deployment_id: str) -> dict:
    """A flow run of the deployment, created through Prefect's own client, which asks again when a busy server
    answers 503 (a CI run on 2 cores got one). The raw helper above must not repeat a write; under an idempotency
    key the server returns the run a repeated request already created instead of a second one."""
    import uuid

    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: f"{prefect}/api"}), get_client(sync_client=True) as client:
        run = client.create_flow_run_from_deployment(deployment_id, idempotency_key=str(uuid.uuid4()))
    return run.model_dump(mode="json")


def _created_run(page, prefect: str, said: list[str]) -> str:
    """The flow run the form's Submit created, as the API has it. Its notice ("View run") is a toast that
    can come and go before a loaded machine looks, so the API is asked. Between asks the page waits (not
    time.sleep): the context's route handler answers the page's requests only while Playwright runs. A
    form that created nothing fails with what the page said. A Submit the server answered with 503 (busy: a CI
    run saw one) is clicked again, as a person would, up to three times."""
    deployment = _deployment(prefect)["id"]
    query = {"deployments": {"id": {"any_": [deployment]}}}
    deadline, resubmitted = time.time() + 180, 0
    while not (runs := _get_json(f"{prefect}/api/flow_runs/filter", query)) and time.time() < deadline:
        refused = sum(s.startswith("503 POST") and s.endswith("/create_flow_run") for s in said)
        if refused > resubmitted and resubmitted < 3:
            resubmitted += 1
            page.get_by_role("button", name="Submit").click()
        page.wait_for_timeout(1000)
    if not runs:
        _shot(page, "2b-prefect-after-submit")
        flagged = page.locator("[class*=invalid], [class*=error]").all_inner_texts()  # the form's own messages
        raise AssertionError(
            "the form's Submit created no flow run in 180 s; the page said:\n"
            + "\n".join(str(line) for line in said[-20:] + flagged[:20])
        )
    (flow_run_id,) = [run["id"] for run in runs]
    return flow_run_id


def test_a_run_started_from_the_prefect_form_completes_with_its_summary(ui_run):
    page, run = ui_run
    assert run["state"]["type"] == "COMPLETED", run["state"]
    config = run["parameters"]["config"]
    assert config["train"]["max_steps"] == STEPS and config["registry"]["auto_promote"] is False
    assert run["name"].startswith(f"train-{MODEL}-")
    page.reload()
    page.get_by_text("Completed").first.wait_for()
    assert run["name"] in page.inner_text("body")
    _shot(page, "3-prefect-flow-run")
    page.get_by_text("Artifacts", exact=True).first.click()
    page.get_by_text("pipeline-summary").first.wait_for()
    _shot(page, "4-prefect-artifacts")
    page.get_by_text("pipeline-summary").first.click()  # the artifact's own page
    page.get_by_text("Foundry pipeline finished").first.wait_for()
    body = page.inner_text("body")
    assert f"models:/{MODEL}/1" in body and "alias: challenger" in body and "unigram" in body
    _shot(page, "5-prefect-summary-artifact")


def _mlflow_run_id(mlflow: str, flow_run_id: str) -> str:
    experiment = _get_json(f"{mlflow}/api/2.0/mlflow/experiments/get-by-name?experiment_name=foundry")
    found = _get_json(
        f"{mlflow}/api/2.0/mlflow/runs/search",
        {
            "experiment_ids": [experiment["experiment"]["experiment_id"]],
            "filter": f"tags.`prefect.flow_run_id` = '{flow_run_id}'",
        },
    )
    (run,) = found["runs"]
    return run["info"]["run_id"], run["info"]["experiment_id"]


def test_the_mlflow_ui_shows_the_version_aliases_card_and_run_metrics(ui_run, servers, chromium):
    _, mlflow = servers
    _, flow_run = ui_run
    run_id, experiment_id = _mlflow_run_id(mlflow, flow_run["id"])
    page = chromium.new_page()
    page.set_default_timeout(60_000)
    page.goto(f"{mlflow}/#/models/{MODEL}")
    page.get_by_text("Version 1").first.wait_for()
    body = page.inner_text("body").replace("\xa0", " ")
    assert "@ challenger" in body and "@ champion" not in body and "gate.verdict" in body  # review mode
    _shot(page, "6-mlflow-registered-model")
    page.goto(f"{mlflow}/#/models/{MODEL}/versions/1")
    page.get_by_text("Holdout (bits per byte, lower is better)").first.wait_for()
    body = page.inner_text("body")
    assert "no champion yet" in body and run_id in body  # the model card, the version's description
    _shot(page, "7-mlflow-model-version")
    page.goto(f"{mlflow}/#/experiments/{experiment_id}/runs/{run_id}")
    page.get_by_text("holdout/bits_per_byte").first.wait_for()
    page.get_by_text("system/cpu_utilization_percentage").first.wait_for()
    _shot(page, "8-mlflow-run-metrics")
    page.close()


def test_in_review_mode_the_champion_set_in_the_mlflow_ui_is_what_retrain_starts_from(ui_run, servers, chromium):
    prefect, mlflow = servers
    page = chromium.new_page()
    page.set_default_timeout(60_000)
    page.goto(f"{mlflow}/#/models/{MODEL}/versions/1")
    page.get_by_title("Edit aliases").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_role("combobox").fill("champion")
    dialog.get_by_role("combobox").press("Enter")
    _shot(page, "9-mlflow-set-champion")
    dialog.get_by_role("button", name="Save aliases").click()
    dialog.wait_for(state="hidden")
    page.get_by_title("champion", exact=True).first.wait_for()
    _shot(page, "10-mlflow-champion-set")
    page.close()
    alias = _get_json(f"{mlflow}/api/2.0/mlflow/registered-models/alias?name={MODEL}&alias=champion")
    assert alias["model_version"]["version"] == "1"
    # The scheduled retrain, started now: it starts from the champion, and finds nothing new in the source.
    deployment = _get_json(f"{prefect}/api/deployments/name/retrain/retrain")
    flow_run = _run_deployment(prefect, deployment["id"])
    done = _wait(
        "the retrain run did not finish",
        lambda: (
            (run := _flow_run(prefect, flow_run["id"]))["state"]["type"] in ("COMPLETED", "FAILED", "CRASHED") and run
        ),
        timeout=300,
        every=0.5,
    )
    assert done["state"]["type"] == "COMPLETED", done["state"]
    run_id, _ = _mlflow_run_id(mlflow, flow_run["id"])
    tags = _get_json(f"{mlflow}/api/2.0/mlflow/runs/get?run_id={run_id}")["run"]["data"]["tags"]
    tags = {t["key"]: t["value"] for t in tags}
    assert tags["parent_model"] == f"models:/{MODEL}/1" and tags["retrain.skipped"] == "true"


def test_the_pages_ask_for_nothing_beyond_loopback(ui_run, servers, chromium):
    """Each page the tests above look at, opened here again (whatever ran before): neither UI asks for anything
    (fonts, telemetry, docs) from elsewhere. The requests are the page's own, recorded before the routing refuses
    any that leave loopback."""
    prefect, mlflow = servers
    _, flow_run = ui_run
    run_id, experiment_id = _mlflow_run_id(mlflow, flow_run["id"])
    pages = [  # (address, a text it shows once loaded, a tab to open there)
        (f"{prefect}/deployments", "train", None),
        (f"{prefect}/runs/flow-run/{flow_run['id']}", "pipeline-summary", "Artifacts"),
        (f"{mlflow}/#/models/{MODEL}", "Version 1", None),
        (f"{mlflow}/#/models/{MODEL}/versions/1", "Holdout (bits per byte, lower is better)", None),
        (f"{mlflow}/#/experiments/{experiment_id}/runs/{run_id}", "holdout/bits_per_byte", None),
    ]
    page = chromium.new_page()
    page.set_default_timeout(60_000)
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url))
    for url, text, tab in pages:
        page.goto(url)
        if tab:
            page.get_by_text(tab, exact=True).first.click()
        page.get_by_text(text).first.wait_for()
        page.wait_for_timeout(2000)  # what a page fetches after it shows (fonts, telemetry)
    page.close()
    servers_asked = {f"{u.scheme}://{u.netloc}" for u in map(urlsplit, asked)}
    assert {prefect, mlflow} <= servers_asked
    assert [url for url in asked if _beyond_loopback(url)] == []
    assert OUTSIDE == []  # nor any page before, in this module
