"""Where alignment starts: the registered version it starts from, with the chat template's markers added,
and the run's config built on that version's model shape and tokenizer."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from foundry.config import FoundryConfig
from foundry.core.contracts import ParentModel
from foundry.core.fs import remove_tree
from foundry.training.warm_start import warn_of_train_keys_not_taken


def align_config(config: FoundryConfig, base: ParentModel) -> FoundryConfig:
    """This run's data and `align` settings with the base's model shape, started from its weights and chat
    tokenizer (`chat_base`), trained with `train` under the method's recipe (`align.sft_train` or
    `align.dpo_train`) under `align.train`, registered under `align.model_name`. The run's `train` section holds
    what it trains with, so MLflow's `train.*` params and the recorded config show the values used."""
    warn_of_train_keys_not_taken(config, "align")
    return config.registering_as(config.align.model_name).warm_started_from(base, config.training_for("align"))


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
