"""The align flow on the tiny twin, under a real (temporary) Prefect server and MLflow registry: SFT from the
tiny base, DPO from that SFT version through `foundry align`, and bad records stopping a run that registers nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from conftest import REPO_ROOT, run_page

from models.request_limits import CHAT_COMPLETION_FIELDS

TINY_ALIGN = str(REPO_ROOT / "configs" / "tiny_align.yaml")


def test_sft_registers_an_aligned_version_with_lineage_gate_and_card(aligned_model, base_model):
    import mlflow
    from mlflow import MlflowClient

    from foundry.registry.lineage import lineage
    from foundry.reports.summaries import align_summary

    config, result = aligned_model
    _, base = base_model
    client = MlflowClient()
    version = client.get_model_version("it-chat", result.model_version)
    tags = version.tags
    assert result.parent == tags["parent_model"] == base.model_uri and tags["align.method"] == "sft"
    assert tags["pretrain.data_version"] == base.data_version  # the holdout the next alignment must not forget
    assert tags["gate.passed"] == "true" and result.promoted and "gate.check.response_loss" in tags
    assert tags["data_version"] == result.data_version != base.data_version
    # Published as one unit under the promotion lock, like pretraining: complete, `challenger` at least.
    assert tags["foundry.publication"] == "complete" and "challenger" in version.aliases
    assert tags["gate.promoted"] == "true"  # forgetting allowed (conftest): a lower response loss passes
    # Evaluated beside the base on the same held-out conversations and on the base's pretraining holdout.
    for scores in (result.metrics.base, result.metrics.aligned):
        assert scores.response_loss is not None and scores.pretrain_bits_per_byte is not None
    assert result.metrics.aligned.response_loss < result.metrics.base.response_loss
    run = client.get_run(result.run_id)
    flow_run, artifacts = run_page(result.run_id)
    assert flow_run.name == f"align-sft-it-chat-{result.data_version[:8]}"
    assert align_summary(result) in artifacts["pipeline-summary"].data  # what `foundry align` prints
    assert f"/models/it-chat/versions/{result.model_version}" in artifacts["model-version"].data
    stage = {(r["what"], r["reason"]): r["documents"] for r in json.loads(artifacts["data-stage"].data)}
    assert stage[("documents kept", "")] == run.data.metrics["data/records_out"]
    assert run.data.tags["foundry.stage"] == "align" and run.data.params["train.init_from"].endswith("model.pt")
    assert run.data.params["registry.model_name"] == "it-chat"
    assert run.data.params["align.replay_fraction"] == "0.25"  # replaying the base's own pretraining data
    assert run.data.tags["align.replay_source"] == base.data_version  # a typed value beside the config, logged
    assert not any(key.startswith("align.replay_from") for key in run.data.params)  # no run-time state in the config
    assert {"train/loss", "val/loss", "data/records_out"} <= set(run.data.metrics)
    generations = json.loads(open(client.download_artifacts(result.run_id, "evaluation/generations.json")).read())
    assert generations["columns"] == ["prompt", "base", "aligned"] and len(generations["data"]) == len(
        config.align.prompts
    )
    assert "| response_loss |" in version.description and base.model_uri in version.description
    # Its energy per stage (#59): on the run, in the card and the summary.
    assert run.data.metrics["energy/train/joules"] > 0 and run.data.metrics["energy/evaluate/joules"] > 0
    assert run.data.metrics["energy/train/joules_per_token"] > 0 and run.data.tags["energy.train.method"]
    assert "## Energy" in version.description and "- train: " in version.description
    assert result.energy.joules == pytest.approx(run.data.metrics["energy/joules"])
    assert "energy     " in align_summary(result)
    chain = lineage(result.model_uri)
    assert [r.model for r in chain] == [result.model_uri, base.model_uri]
    # The template travels with the version: in model.pt, and as special tokens in its tokenizer.
    folder = Path(mlflow.artifacts.download_artifacts(f"models:/it-chat/{result.model_version}"))
    from tokenizers import Tokenizer

    from models.chat import ChatTemplate, saved_template
    from models.gpt import load_saved

    saved = load_saved(folder / "artifacts" / "model.pt")
    assert saved_template(saved) == ChatTemplate()
    tokenizer = Tokenizer.from_file(str(folder / "artifacts" / "tokenizer.json"))
    assert saved["model_args"]["vocab_size"] == tokenizer.get_vocab_size()
    assert all(tokenizer.token_to_id(t) is not None for t in ChatTemplate().special_tokens)


def test_the_aligned_version_answers_prompts_and_chats_through_pyfunc(aligned_model):
    import mlflow

    _, result = aligned_model
    model = mlflow.pyfunc.load_model(result.model_uri)
    inputs = model.metadata.get_input_schema().input_names()
    assert inputs == ["prompt", "messages", *CHAT_COMPLETION_FIELDS]  # the chat-completions request's optional fields
    chat = [{"role": "user", "content": "Add: 2 + 3"}]
    out = model.predict(pd.DataFrame({"messages": [chat]}), params={"max_new_tokens": 6, "top_k": 1})
    prompt = model.predict(pd.DataFrame({"prompt": ["Add: 2 + 3"]}), params={"max_new_tokens": 6, "top_k": 1})
    assert out["completion"][0] == prompt["completion"][0]  # a prompt is one user turn, through the template
    base = mlflow.pyfunc.load_model(result.parent)
    with pytest.raises(Exception, match="never aligned"):
        base.predict(pd.DataFrame({"messages": [chat]}))


def test_batched_greedy_replies_are_the_one_at_a_time_ones(aligned_model, instruction_set):
    """The benchmark's exact match decodes prompts of one length together; it must read what serving would."""
    import mlflow

    from foundry.align.evaluation import greedy_replies
    from models.chat import ChatTemplate
    from models.generate import Sampling, generate_replies
    from models.gpt import load_gpt

    _, result = aligned_model
    folder = Path(mlflow.artifacts.download_artifacts(result.model_uri)) / "artifacts"
    from tokenizers import Tokenizer

    model, tokenizer = load_gpt(folder / "model.pt"), Tokenizer.from_file(str(folder / "tokenizer.json"))
    examples = [json.loads(line) for line in instruction_set["test"].read_text().splitlines()]
    chats = [[{"role": "user", "content": e["prompt"]}] for e in examples]
    fits = model.config.block_size - 8  # one at a time refuses prompts the context cannot hold with the reply
    chats = [c for c in chats if len(ChatTemplate().encode_prompt(tokenizer, c)) <= fits]
    assert len({len(ChatTemplate().encode_prompt(tokenizer, c)) for c in chats}) > 1 and len(chats) > 4
    alone = generate_replies(model, tokenizer, ChatTemplate(), chats, Sampling(8, top_k=1))
    assert greedy_replies(model, tokenizer, ChatTemplate(), chats, 8, batch=4) == alone


def test_dpo_from_the_sft_version_through_the_cli(aligned_model, base_model, instruction_set, capsys):
    from mlflow import MlflowClient

    from foundry.cli import main

    _, sft = aligned_model
    _, base = base_model
    argv = ["align", sft.model_uri, "--config", TINY_ALIGN, "--set", "align.model_name=it-chat"]
    argv += ["--set", "align.method=dpo", "--set", f"data.source={instruction_set['dpo'].parent}"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "alignment (dpo) finished" in printed and "preference_accuracy" in printed
    client = MlflowClient()
    (found,) = [v for v in client.search_model_versions("name='it-chat'") if v.run_id != sft.run_id]
    dpo = client.get_model_version("it-chat", found.version)
    tags = dpo.tags
    assert tags["parent_model"] == sft.model_uri and tags["align.method"] == "dpo"
    assert {"gate.check.preference_accuracy", "gate.check.preference_margin", "gate.check.pretrain_regression"} <= set(
        tags
    )
    run = client.get_run(dpo.run_id)
    # The default replay: the SFT version carries its base's pretraining data version, and DPO replays it too.
    assert run.data.params["align.replay_fraction"] == "0.25" and "train/dpo_replay_nll" in run.data.metrics
    assert run.data.tags["align.replay_source"] == tags["pretrain.data_version"] == base.data_version
    for key in ("train/dpo_margin", "train/dpo_accuracy", "train/dpo_kl", "val/dpo_accuracy"):
        assert key in run.data.metrics, key
    for who in ("base", "align"):
        assert 0 <= run.data.metrics[f"{who}/preference_accuracy"] <= 1
    # The SFT version had the template's tokens already: it starts from its own files, nothing grown twice.
    assert "chat-base" not in run.data.params["tokenizer.from_file"]
    sft_run = client.get_run(sft.run_id)
    assert "chat-base" in sft_run.data.params["tokenizer.from_file"]


def test_bad_records_stop_the_run_naming_file_and_line_and_register_nothing(base_model, tmp_path, capsys):
    from mlflow import MlflowClient

    from foundry.cli import main

    source = tmp_path / "chat"
    source.mkdir()
    good = {"prompt": "Add: 1 + 1", "response": "2"}
    (source / "a.jsonl").write_text(
        json.dumps(good) + "\n" + json.dumps({"messages": [{"role": "robot", "content": "x"}]}) + "\n"
    )
    argv = ["align", base_model[1].model_uri, "--config", TINY_ALIGN, "--set", "align.model_name=it-chat-bad"]
    assert main(argv + ["--set", f"data.source={source}", "--set", "data.on_error=fail"]) == 1
    error = capsys.readouterr().err
    assert "a.jsonl:2: invalid role" in error and "robot" in error
    assert MlflowClient().search_model_versions("name='it-chat-bad'") == []


def _reproduce_argv(model_uri: str) -> list[str]:
    """`foundry reproduce`, forced where this checkout holds uncommitted code (CI's clone is clean)."""
    from foundry.runtime.tracking import git_state

    return ["reproduce", model_uri] + (["--force"] if git_state()["git_dirty"] != "false" else [])


def test_reproduce_of_a_replay_aligned_version_replays_the_same_pretraining_data(aligned_model, base_model, capsys):
    """The default alignment replays a quarter of each batch from its base's pretraining data: `foundry reproduce`
    hydrates that data version from the version's `pretrain.*` tags, draws the same windows, trains and gets the
    aligned model's recorded held-out scores back, on the conversations and on the pretraining holdout."""
    from mlflow import MlflowClient

    from foundry.cli import main

    _, result = aligned_model
    _, base = base_model
    client = MlflowClient()
    start = Path(client.get_run(result.run_id).data.params["train.init_from"])
    assert start.parent.name == "chat-base"
    shutil.rmtree(
        start.parent
    )  # as on another home, or after a gc: rebuilt from the parent, as the align flow built it
    assert main(_reproduce_argv(result.model_uri)) == 0
    printed = capsys.readouterr().out
    assert "identical holdout metrics" in printed, printed
    for key in ("align/response_loss", "align/pretrain_bits_per_byte"):
        assert key in printed, printed
    (run,) = client.search_runs(
        [client.get_run(result.run_id).info.experiment_id],
        f"tags.`foundry.reproduces` = '{result.model_uri}'",
    )
    assert run.info.run_id != result.run_id and run.data.tags["foundry.stage"] == "reproduce"
    assert run.data.tags["align.replay_source"] == base.data_version  # the same pretraining text, replayed again
    assert run.data.tags["data_version"] == result.data_version  # and the same conversations
    assert run.data.params["train.init_from"] == str(start) and start.is_file()  # the same start, rebuilt
    assert run.data.metrics["align/response_loss"] == pytest.approx(result.metrics.aligned.response_loss, abs=1e-6)


def test_reproduce_refuses_an_aligned_version_that_does_not_record_what_it_replayed(aligned_model, capsys):
    """A replay-aligned version registered without its `pretrain.data_version` tag (as versions tagged by hand, or
    by code before the tag, are): reproduce stops before training, naming the tag, instead of training without
    the replay the version trained with."""
    from mlflow import MlflowClient

    from foundry.cli import main
    from foundry.registry import versions

    _, result = aligned_model
    original = MlflowClient().get_model_version("it-chat", result.model_version)
    tags = {k: v for k, v in original.tags.items() if not k.startswith(("foundry.", "gate.", "pretrain."))}
    copy = versions.publish(original.source, "it-chat-untagged", original.run_id, tags, True, "without pretrain.*")
    uri = f"models:/it-chat-untagged/{copy.version}"
    assert main(_reproduce_argv(uri)) == 1
    error = capsys.readouterr().err
    assert "records no 'pretrain.data_version' tag" in error and "replay cannot be rebuilt" in error, error
    client = MlflowClient()
    experiments = [e.experiment_id for e in client.search_experiments()]
    assert client.search_runs(experiments, f"tags.`foundry.reproduces` = '{uri}'") == []  # nothing trained
