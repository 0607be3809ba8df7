"""The `serving` section: the bounds of one request to a registered version, saved with it when it is logged."""

from __future__ import annotations

from pydantic import Field

from foundry.config.base import _Section
from models.request_limits import LIMITS


class ServingConfig(_Section):
    max_new_tokens: int = Field(
        LIMITS["max_new_tokens"],
        ge=1,
        description="Most tokens a request may ask a registered version to generate per row (params.max_new_tokens); "
        "saved with the version, a request over it gets HTTP 400.",
    )
    max_prompt_chars: int = Field(
        LIMITS["max_prompt_chars"],
        ge=1,
        description="Longest prompt a registered version takes, in characters (a chat: its contents together); "
        "saved with the version, a longer row gets HTTP 400.",
    )
    max_rows: int = Field(
        LIMITS["max_rows"],
        ge=1,
        description="Most rows (prompts or chats) in one request to a registered version; saved with the version, "
        "a larger batch gets HTTP 400.",
    )
    max_turns: int = Field(
        LIMITS["max_turns"],
        ge=1,
        description="Most turns in one chat to a registered version, counted before any is encoded; saved with the "
        "version, a longer chat gets HTTP 400.",
    )
    max_body_bytes: int = Field(
        LIMITS["max_body_bytes"],
        ge=1,
        description="Largest request body, in bytes, `foundry serve-model` reads for a registered version (JSON as "
        "sent); saved with the version, a larger body gets HTTP 413 before it is parsed.",
    )
    max_request_s: int = Field(
        LIMITS["max_request_s"],
        ge=1,
        description="Longest a request to a registered version may generate, in seconds of wall-clock time from when "
        "the model takes it: past it generation stops (no step starts after it) and the request gets HTTP 504, or a "
        "streamed one an error event; saved with the version.",
    )
