"""The alignment gate's refusal forced through its gathering step (`foundry.align.gate.gather_alignment`) against
the session's embedded MLflow registry (a local store under the test's $FOUNDRY_HOME, no server): a challenger
that beats its own base is refused when the champion of the name it registers under scores better on the same
held-out data, or cannot be scored on it. Tiny random-weight models, registered through Foundry's own functions;
no training."""

from __future__ import annotations

import math

import pytest
import torch
from tokenizers import Tokenizer

from foundry.align.evaluation import heldout_scores
from foundry.align.gate import decide_alignment
from foundry.align.prepare import prepare_aligned
from foundry.config import load_config
from foundry.core.contracts import Candidate, DataVersion, RunContext
from foundry.core.metrics.aligned import AlignedScores, AlignmentMetrics
from foundry.data.acquire import acquire_source
from foundry.data.manifest import DatasetManifest
from foundry.registry import versions
from foundry.runtime import tracking
from foundry.serving.package import log_model
from models.chat import ChatTemplate, add_chat_tokens
from models.gpt import GPT, GPTConfig, load_gpt

pytestmark = pytest.mark.usefixtures("home")


@pytest.fixture(scope="module")
def chat_data(tiny_config, tiny_dataset, tmp_path_factory):
    """Chat records prepared as `foundry align` prepares them: (config, prepared folder with its tokenizer)."""
    root = tmp_path_factory.mktemp("incumbent")
    tokenizer = Tokenizer.from_file(str(tiny_dataset / "tokenizer.json"))
    add_chat_tokens(tokenizer, ChatTemplate())
    tokenizer.save(str(root / "tokenizer.json"))
    (root / "src").mkdir()
    lines = [f'{{"prompt": "Add: {i} + 1", "response": "{i + 1}"}}\n' for i in range(30)]
    (root / "src" / "records.jsonl").write_text("".join(lines))
    overrides = [f"data.source={root / 'src'}", "align.method=sft", f"tokenizer.from_file={root / 'tokenizer.json'}"]
    overrides += [f"model.block_size={tiny_config.model.block_size}", "data.holdout_fraction=0.3"]
    config = load_config(None, overrides)
    prepare_aligned(acquire_source(config.data, root / "source_manifest.json"), config, root / "prepared")
    return config, root / "prepared"


def model_file(config, vocab_size: int, folder, logit_scale: float):
    """A random-weight model whose logits are `logit_scale` times its initial ones: 0 gives the uniform
    distribution (ln V nats a token on anything), 50 confident guesses (far worse than uniform)."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=vocab_size, **config.model.model_dump()))
    with torch.no_grad():
        model.lm_head.weight.mul_(logit_scale)  # tied to the embedding: the output scale follows it
    folder.mkdir(parents=True)
    path = folder / "model.pt"  # the name the registered package and `versions.download` expect
    torch.save({"model_args": model.config.to_dict(), "state_dict": model.state_dict()}, path)
    return path


def register_champion(config, name: str, checkpoint, tokenizer) -> str:
    run_id = tracking.start_pipeline_run(config, run_name=f"incumbent-{name}")
    uri = log_model(run_id, checkpoint, tokenizer)
    return versions.publish(uri, name, run_id, {}, True, "seeded for the test").version


def challenger(config, name: str, data_dir, tmp_path) -> tuple:
    """A confident random model that beats its (stated) base and forgets nothing, as the align flow would
    hand it to the gate: (config of `name`, candidate)."""
    named = config.model_copy(update={"registry": config.registry.model_copy(update={"model_name": name})})
    vocab = Tokenizer.from_file(str(data_dir / "tokenizer.json")).get_vocab_size()
    checkpoint = model_file(config, vocab, tmp_path / "challenger", 50.0)
    held = heldout_scores(load_gpt(checkpoint), data_dir, DatasetManifest.read(data_dir), 8)
    aligned = AlignedScores(response_loss=held["response_loss"], pretrain_bits_per_byte=2.0)
    base = AlignedScores(response_loss=held["response_loss"] + 1.0, pretrain_bits_per_byte=2.0)
    run = RunContext(run_id="incumbent-test", dir=tmp_path, home=tmp_path / "home")
    metrics = AlignmentMetrics(aligned=aligned, base=base)
    data = DataVersion(data_version="5" * 32, remote="r")
    return named, Candidate(checkpoint=checkpoint, data=data, data_dir=data_dir, metrics=metrics, run=run)


def failed(decision) -> list[str]:
    return [name for name, check in decision.checks.items() if not check.passed]


def test_a_stronger_champion_of_its_name_refuses_an_aligned_model_that_beats_its_base(chat_data, tmp_path):
    config, data_dir = chat_data
    named, candidate = challenger(config, "incumbent-stronger", data_dir, tmp_path)
    vocab = Tokenizer.from_file(str(data_dir / "tokenizer.json")).get_vocab_size()
    uniform = model_file(config, vocab, tmp_path / "champion", 0.0)
    version = register_champion(named, "incumbent-stronger", uniform, data_dir / "tokenizer.json")

    decision = decide_alignment(named, candidate)
    incumbent = decision.inputs.incumbent
    assert (decision.passed, decision.make_champion, failed(decision)) == (False, False, ["beats_incumbent"])
    assert decision.inputs.incumbent_version == version and incumbent.response_loss == pytest.approx(math.log(vocab))
    assert f"FAILED response_loss {candidate.metrics.aligned.response_loss:.4f} vs champion v{version}" in (
        decision.verdict
    )


def test_a_champion_that_cannot_be_scored_on_this_data_refuses_too(chat_data, tiny_dataset, tmp_path):
    config, data_dir = chat_data
    named, candidate = challenger(config, "incumbent-unscored", data_dir, tmp_path)
    plain_vocab = Tokenizer.from_file(str(tiny_dataset / "tokenizer.json")).get_vocab_size()
    other = model_file(config, plain_vocab, tmp_path / "champion", 0.0)  # no chat tokens: another tokenizer
    register_champion(named, "incumbent-unscored", other, tiny_dataset / "tokenizer.json")

    decision = decide_alignment(named, candidate)
    assert (decision.passed, decision.inputs.incumbent, failed(decision)) == (False, None, ["beats_incumbent"])
