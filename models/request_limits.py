"""Defaults and bounds of one request to a served model (text or image), and the bounds a version was logged with;
no torch, so the config reads them too."""

# Sampling defaults of the served model (its signature's parameters).
DEFAULTS = {"max_new_tokens": 64, "temperature": 0.8, "top_k": 40, "seed": 0}
# Bounds of one request (`serving` in the config), saved with each version; a version logged before they
# existed serves with these.
LIMITS = {
    "max_new_tokens": 256,
    "max_prompt_chars": 8192,
    "max_rows": 16,
    "max_body_bytes": 4 * 2**20,
    "max_turns": 256,  # each turn takes 3 tokens or more of the context, whatever its content
    "max_request_s": 30,  # below MLflow's own 60 s (MLFLOW_SCORING_SERVER_REQUEST_TIMEOUT), which stops nothing
}
# The largest body `foundry serve-model` reads for a version that saved no `max_body_bytes` (one logged before it
# existed, or an image classifier): room for an image of `IMAGE_LIMITS["max_image_bytes"]` in base64 and more.
MAX_BODY_BYTES = 32 * 2**20
# The chat-completions request's fields beside `messages` (OpenAI's names), optional columns of the signature
# with their MLflow types: a request that names any of them is answered in that shape.
CHAT_COMPLETION_FIELDS = {
    "model": "string",
    "max_tokens": "long",
    "max_completion_tokens": "long",
    "n": "long",
    "stream": "boolean",
}
# Bounds of one request to a served image classifier, saved with each version as its `model_config`.
# Each read from the images' headers before any is decoded: pixels per image and per request (decoding and fitting
# cost with them: 64 images of 25,000,000 pixels took a minute), and the long side over the short one (a strip of
# 25,000,000 x 1 pixels resizes as slowly as a square of as many and means nothing once fitted).
IMAGE_LIMITS = {
    "max_rows": 64,
    "max_image_bytes": 10 * 2**20,
    "max_pixels": 25_000_000,
    "max_request_pixels": 100_000_000,
    "max_aspect_ratio": 32,
}


class TimeLimit(RuntimeError):
    """Generation stopped at its deadline (a request's `max_request_s`), after `tokens` steps."""

    def __init__(self, tokens: int):
        super().__init__(f"generation stopped at its deadline after {tokens} tokens")
        self.tokens = tokens


def saved_limits(model_config: dict | None, limits: dict[str, int] = LIMITS) -> dict[str, int]:
    """The bounds a version was logged with (its `model_config`), each one it lacks at its default in `limits`
    (`LIMITS`, or `IMAGE_LIMITS` for an image classifier): a version logged before there were any serves with these."""
    saved = model_config or {}
    return {key: int(saved.get(key, default)) for key, default in limits.items()}


def base64_chars(max_bytes: int) -> int:
    """The longest base64 text of `max_bytes` bytes: 4 characters per 3 bytes, a line break every 76 of them."""
    chars = (max_bytes + 2) // 3 * 4
    return chars + chars // 76 + 2
