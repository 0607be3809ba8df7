"""The `align` section of the config (`foundry.config.FoundryConfig.align`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from foundry.config.base import _Section
from foundry.config.training import TrainConfig, train_override

AlignTrain = train_override(
    "AlignTrain",
    __name__,
    "Keys of `train` an alignment sets for either method, over the method's recipe (align.sft_train or "
    "align.dpo_train); a key left out or null keeps the recipe's, then `train`'s.",
)
# The recipes: bench/README.md, "Alignment on the generated instruction set" (SFT: recipe D; DPO: the bench's).
# Both were measured in float32, uncompiled, which they keep when `train` pretrains otherwise.
SftTrain = train_override(
    "SftTrain",
    __name__,
    "Keys of `train` SFT sets otherwise (batch_size: packed rows); align.train's keys win over these, and a key "
    "left out or null keeps `train`'s.",
    max_steps=2500,
    batch_size=32,
    learning_rate=3e-3,
    warmup_steps=30,
    precision="32-true",
    compile=False,
    weight_decay=0.1,
)
DpoTrain = train_override(
    "DpoTrain",
    __name__,
    "Keys of `train` DPO sets otherwise (batch_size: preference pairs); align.train's keys win over these, and a "
    "key left out or null keeps `train`'s.",
    max_steps=200,
    batch_size=32,
    learning_rate=5e-5,
    warmup_steps=10,
    precision="32-true",
    compile=False,
    weight_decay=0.1,
)
Method = Literal["sft", "dpo"]


class AlignConfig(_Section):
    """`foundry align MODEL_URI`: instruction tuning (sft) or preference optimisation (dpo) of a registered version."""

    method: Method = Field(
        "sft",
        description="sft: next-token loss on assistant tokens of chat or prompt/response records; dpo: "
        "preference optimisation on prompt/chosen/rejected records against a frozen copy of the start.",
    )
    model_name: str = Field(
        "foundry-chat", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$", description="Registered name of aligned versions."
    )
    train: AlignTrain = Field(
        AlignTrain(),
        description="Keys of `train` set here win for either method over its recipe (align.sft_train or "
        "align.dpo_train); a key left out or null keeps the recipe's value, then `train`'s.",
    )
    sft_train: SftTrain = Field(
        SftTrain(),
        description="SFT's recipe: keys of `train` an sft run sets otherwise, unless align.train sets them (2,500 "
        "steps at 3e-3, rows of the base's 256 tokens, a quarter of them replayed: bench/README.md).",
    )
    dpo_train: DpoTrain = Field(
        DpoTrain(),
        description="DPO's recipe: keys of `train` a dpo run sets otherwise, unless align.train sets them "
        "(200 steps at 5e-5, with align.beta 0.5, kept held-out preference accuracy and passed the gate from the SFT "
        "recipe's version; at beta 0.1 every rate tried lost a pair: bench/README.md).",
    )
    beta: float = Field(
        0.5,
        gt=0,
        description="DPO: strength of the pull towards the reference model (0.5: at 0.1 DPO lost a held-out pair the "
        "SFT version won on the default base, and failed its gate: bench/README.md).",
    )
    sft_weight: float = Field(
        1.0,
        ge=0,
        description="DPO: weight of the chosen replies' own next-token loss beside the DPO loss; it keeps the "
        "policy generating them while it learns the preferences (0: DPO alone).",
    )
    replay_fraction: float = Field(
        0.25,
        ge=0,
        lt=1,
        description="Share of each batch (the resolved train.batch_size: packed rows for sft, pairs for dpo) that is "
        "windows of the parent's pretraining training split instead, every next token trained, against forgetting. "
        "sft: the windows are rows of the batch, in its one token-mean loss; dpo: the windows' mean next-token loss "
        "is added times windows/pairs, so each window weighs as much as one pair. The version must carry its "
        "pretraining data version, which the run hydrates and logs as the tag align.replay_source (a version "
        "without one is refused: set 0 to align it without replay); 0: none.",
    )
    prompts: list[str] = Field(
        ["Write in capital letters: river stone", "Add: 12 + 30", "Sort ascending: 41, 7, 19"],
        description="User messages whose replies, rendered through the chat template, are logged with every "
        "evaluation, the base's beside the aligned model's.",
    )
    max_new_tokens: int = Field(
        32, ge=1, description="Most tokens of each reply to `prompts` (greedy decoding) logged with an evaluation."
    )

    def recipe_of(self, method: Method) -> SftTrain | DpoTrain:
        """The method's own `train` keys: `sft_train` or `dpo_train`."""
        return self.dpo_train if method == "dpo" else self.sft_train

    def training(self, train: TrainConfig, method: Method | None = None) -> TrainConfig:
        """`train` under the method's recipe under the keys set in `align.train`, validated as one `train`."""
        recipe = self.recipe_of(method or self.method)
        return recipe.model_copy(update=self.train.model_dump(exclude_none=True)).applied_to(train)
