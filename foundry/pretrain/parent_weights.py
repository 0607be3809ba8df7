"""A text parent's weights as the start of a run that continues from it (retrain, fine-tune, the chat tuning's
reference): the GPT settings they must share with that run (`PARENT_SETTINGS`), checked before they load
(`text_start`)."""

from __future__ import annotations

# The model settings a parent's weights must share with the run that starts from them. Some change what the same
# names and shapes compute (heads, QK-norm, the activation): loading would succeed and train another function.
PARENT_SETTINGS = (
    *("n_layer", "n_head", "n_embd", "positions"),
    *("bigram_buckets", "qk_norm", "mlp_activation", "value_embeddings", "mtp_depth"),
)


def text_start(parent: dict, model_config) -> dict:
    """A text parent's weights (its `model.pt` as loaded) for a model of `model_config` (a `models.gpt.GPTConfig`);
    refused, naming the settings, when the parent was trained with other ones."""
    from models.gpt import GPTConfig

    if "model_args" not in parent:
        return parent["state_dict"]
    theirs = GPTConfig(**parent["model_args"]).to_dict()  # a key the parent predates reads as its default
    ours = model_config.to_dict()
    differ = {k: (theirs[k], ours[k]) for k in PARENT_SETTINGS if theirs[k] != ours[k]}
    if differ:
        raise ValueError(
            f"train.init_from's model was trained with other model settings, {differ} (parent's, this run's): "
            "a run from it needs the model.* settings its model.pt was saved with"
        )
    return parent["state_dict"]
