"""Training that continues from a registered model rather than from random weights."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from foundry.config import FoundryConfig, validate
from foundry.contracts import ParentModel
from foundry.fs import remove_tree
from foundry.model_uri import ModelUri


def fine_tune_config(config: FoundryConfig, parent: ParentModel) -> FoundryConfig:
    """This run's data settings with the parent's model shape and tokenizer, started from its weights, trained
    with `train` under `retrain.train`."""
    raw = config.model_dump(mode="json")
    raw["model"] = parent.config["model"]
    raw["tokenizer"] = {**parent.config["tokenizer"], "from_file": parent.tokenizer}
    raw["train"] = {**config.training_for("retrain").model_dump(mode="json"), "init_from": parent.weights}
    return validate(raw)


def align_config(config: FoundryConfig, base: ParentModel) -> FoundryConfig:
    """This run's data and `align` settings with the base's model shape, started from its weights and chat
    tokenizer (`chat_base`), trained with `train` under `align.train`, registered under `align.model_name`."""
    raw = config.model_dump(mode="json")
    raw["model"] = base.config["model"]
    raw["tokenizer"] = {**base.config["tokenizer"], "from_file": base.tokenizer}
    raw["train"] = {**config.training_for("align").model_dump(mode="json"), "init_from": base.weights}
    raw["registry"]["model_name"] = config.align.model_name
    return validate(raw)


def chat_base(parent: ParentModel, home: Path) -> ParentModel:
    """The parent with the chat template's markers: its tokenizer with them as special tokens, its embedding and
    tied output head grown by as many rows (`models.chat.grow_vocabulary`). Written once per version, beside its
    download in `$FOUNDRY_HOME/models/`; a parent that has them already (an aligned version) is returned as it is."""
    import torch
    from tokenizers import Tokenizer

    from models.chat import ChatTemplate, add_chat_tokens, grow_vocabulary
    from models.gpt import gpt_from_saved, load_saved

    template = ChatTemplate()
    tokenizer = Tokenizer.from_file(parent.tokenizer)
    saved = load_saved(parent.weights)
    if add_chat_tokens(tokenizer, template) == 0 and saved.get("chat_template"):
        return parent
    folder = Path(parent.weights).parent.parent / "chat-base"
    if not (folder / "model.pt").is_file():
        scratch = Path(tempfile.mkdtemp(prefix=".chat-base-", dir=folder.parent))
        try:
            grown = grow_vocabulary(gpt_from_saved(saved), tokenizer.get_vocab_size())
            payload = {**saved, "model_args": grown.config.to_dict(), "state_dict": grown.state_dict()}
            torch.save({**payload, "chat_template": template.to_dict(), "grown_from": parent.uri}, scratch / "model.pt")
            tokenizer.save(str(scratch / "tokenizer.json"))
            try:
                os.rename(scratch, folder)  # whole or not at all
            except OSError:
                if not (folder / "model.pt").is_file():
                    raise
        finally:
            remove_tree(scratch, within=folder.parent, ignore_errors=True)
    return parent.model_copy(update={"weights": str(folder / "model.pt"), "tokenizer": str(folder / "tokenizer.json")})


def specialist_config(config: FoundryConfig, parent: ParentModel) -> FoundryConfig:
    """A domain fine-tune of `parent`: its model shape and tokenizer, started from its weights, this config's
    data, `train` and `finetune` settings, registered under `finetune.model_name` (derived by default)."""
    raw = config.model_dump(mode="json")
    raw["model"] = parent.config["model"]
    raw["tokenizer"] = {**parent.config["tokenizer"], "from_file": parent.tokenizer}
    raw["train"]["init_from"] = parent.weights
    base_name = ModelUri.parse(parent.uri).name
    raw["registry"]["model_name"] = config.finetune.resolved_model_name(base_name, config.data.source_list[0])
    return validate(raw)
