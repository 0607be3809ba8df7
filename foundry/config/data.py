"""The `data` section: sources, cleaning rules, PII, the split, shards and where the map steps run."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from foundry.config.base import _Section
from foundry.core.redact import keep, redact_url
from foundry.core.registrations import builtin_sources, modalities

# The detectors of foundry/data/privacy/pii_patterns.py, in the order they run (a test keeps the two equal).
_PII_NAMES = """private_key pem_block aws_access_key aws_secret_key azure_key github_token gitlab_token slack_token
stripe_key google_api_key api_token jwt auth_header url_credentials secret_assignment email national_id
birth_date iban credit_card ipv6 ipv4 private_ipv4 phone"""
PII_KINDS = Literal[tuple(_PII_NAMES.split())]  # type: ignore[misc]
# What data may be, one value for each modality a registered workload reads (`foundry.core.registrations`).
MODALITIES = Literal[modalities()]  # type: ignore[misc]


# The built-in sources: the modality each holds, and why a config of another modality cannot read it; each is a
# registered workload's (`Registration.sources`).
BUILTIN_SOURCES: dict[str, tuple[str, str]] = builtin_sources()


class DataConfig(_Section):
    modality: MODALITIES = Field(  # type: ignore[valid-type]
        "text",
        description="What the sources hold: text (documents, cleaned and tokenized for the GPT) or image "
        "(labelled images, fitted and sharded by the `image` section for the `vision` classifier).",
    )
    source: str = Field(
        "stdlib://",
        description="Local directory or glob, http(s) URL, s3://bucket/prefix, or stdlib:// "
        "(stdlib://PART for one package) for the running interpreter's standard library sources; "
        "images: a class-per-subfolder folder, an index file, an archive or sklearn://digits; "
        "may be empty when `sources` lists them.",
    )
    sources: list[str] = Field(
        [],
        description="More sources, read after `source`, each in any form `source` takes; a source that "
        "cannot be reached is skipped (counted) or stops the run, by on_error.",
    )
    extensions: list[str] = Field(
        [".txt", ".md", ".py", ".jsonl", ".parquet"],
        description="File types read from directories; each also when gzip-compressed (NAME.EXT.gz). "
        ".jsonl and .parquet hold one document per record, other types one per file.",
    )
    exclude_dirs: list[str] = Field(
        ["site-packages", "test", "tests", "idle_test", "__pycache__"],
        description="Directory names skipped while walking a local source.",
    )
    jsonl_text_field: str = Field(
        "text",
        description="Key of the string that holds the text in each .jsonl record; a record without it is malformed "
        "(skipped or fatal, by on_error).",
    )
    parquet_text_column: str = Field(
        "text",
        description="String column that holds the text in each .parquet file; a file without it is skipped or "
        "fatal, by on_error.",
    )
    remote: str = Field("", description="DVC remote URL; empty means $FOUNDRY_HOME/dvc-remote.")
    holdout_fraction: float = Field(
        0.05,
        gt=0,
        lt=0.5,
        description="Share of the kept documents' bytes put in the holdout split, the smallest content hashes first; "
        "a document keeps its split in later versions.",
    )
    min_chars: int = Field(200, ge=1, description="Documents of fewer characters are dropped.")
    max_chars: int = Field(400_000, ge=1, description="Documents of more characters are dropped.")
    max_line_chars: int = Field(2_000, ge=1, description="Documents with a line of more characters are dropped.")
    min_alpha_fraction: float = Field(
        0.25, ge=0, le=1, description="Documents in which letters are a smaller share of the characters are dropped."
    )
    min_mean_word_length: float = Field(
        3.0, ge=0, description="Documents whose whitespace-separated words are shorter on average are dropped (Gopher)."
    )
    max_mean_word_length: float = Field(
        15.0, gt=0, description="Documents whose words are longer on average (in characters) are dropped (Gopher)."
    )
    max_symbol_word_ratio: float = Field(
        0.5, ge=0, description="Documents with more hash signs and ellipses per word are dropped (Gopher)."
    )
    max_repeated_line_fraction: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Documents with a larger share of non-blank lines repeating an earlier one are dropped.",
    )
    max_non_printable_fraction: float = Field(
        0.01,
        ge=0,
        le=1,
        description="Documents with a larger share of control, zero-width or private-use characters are dropped.",
    )
    near_dup_threshold: float = Field(
        0.8,
        ge=0.05,
        le=1,
        description="Estimated Jaccard similarity (MinHash LSH) of word shingles at which a "
        "document counts as a near duplicate of an earlier kept one and is dropped; at most 0.95, or 1 to keep "
        "near duplicates.",
    )
    near_dup_shingle_words: int = Field(5, ge=1, description="Words per shingle for near-duplicate detection.")
    near_dup_num_perm: int = Field(128, ge=64, le=1024, description="MinHash permutations per document signature.")
    pii: list[Literal[PII_KINDS]] = Field(  # type: ignore[valid-type]
        list(PII_KINDS.__args__),
        description="PII detectors whose matches are replaced by typed placeholders such as <EMAIL>.",
    )
    pii_allowed: list[Literal[PII_KINDS]] = Field(  # type: ignore[valid-type]
        [], description="Kinds the gate, which searches with every detector, reports but lets through."
    )
    holdout_tolerance: float = Field(
        0.1,
        ge=0,
        lt=1,
        description="The gate accepts a holdout share of tokens down to "
        "holdout_fraction * (1 - this); the split itself guarantees the fraction in bytes.",
    )
    on_error: Literal["skip", "fail"] = Field(
        "skip",
        description="Bad input (an unreachable source, an unreadable file or record, a refused archive member): "
        "skip leaves it out with a warning, counted by reason in the dataset's manifest; fail stops the run naming it.",
    )
    fetch_retries: int = Field(4, ge=0, le=10, description="Retries of a remote source after a transient error.")
    fetch_backoff_s: float = Field(1.0, ge=0, le=60, description="Seconds before the first retry; doubled each time.")
    # Limits on what a source may cost, so that a hostile or broken one fails with a message instead of
    # filling the disk: each is far above the default corpus (a few MB, no archive) and ordinary corpora.
    max_download_bytes: int = Field(
        2 << 30,
        gt=0,
        description="Most bytes one http(s) file or S3 object may download; a larger one is refused.",
    )
    max_inflated_bytes: int = Field(
        4 << 30,
        gt=0,
        description="Most bytes one archive may extract to in all, and one gzip-compressed file inflate to.",
    )
    max_inflation_ratio: float = Field(
        100.0,
        ge=1,
        description="Most bytes an archive or .gz file may inflate to per compressed byte (text compresses "
        "3-10x; bombs 1000x), checked once past 1 MiB.",
    )
    max_archive_members: int = Field(
        100_000, gt=0, description="Most members (files, folders, links) one archive may hold."
    )
    max_file_bytes: int = Field(
        4 << 30,
        gt=0,
        description="Largest source file fingerprinted; a larger one is refused (skipped or fatal, by on_error) "
        "before it is read.",
    )
    shard_tokens: int = Field(16_777_216, ge=1024, description="Tokens per shard file.")
    workers: int = Field(
        0,
        ge=0,
        description="Worker processes (one core each) for the map steps of prepare and of its gate: 0 one per core "
        "this process may use, 1 all in the calling process; on Dask when `scheduler` is set.",
    )
    scheduler: str = Field(
        "",
        pattern=r"^(|local|(tcp|tls|ws|wss|inproc|ucx)://\S+)$",
        description="'' (worker processes on this machine, no cluster), 'local' (a local Dask cluster of `workers`, "
        "its steps Prefect task runs) or the address of an existing Dask scheduler, e.g. tcp://10.0.0.5:8786, "
        "whose workers see the same files (set `workers` to their count).",
    )
    partition_bytes: int = Field(
        64 << 20,
        ge=1 << 16,
        description="Most source bytes per partition; there are at least as many partitions as workers.",
    )
    progress_every_s: float = Field(
        30.0,
        gt=0,
        description="Seconds between preparation's progress lines in the log (files cleaned, documents, time left).",
    )

    @field_validator("source", "sources")
    @classmethod
    def _no_credentials(cls, value: str | list[str]) -> str | list[str]:
        # A password or signature in a source URL stays out of everything the config is saved into
        # (foundry.core.redact): the config keeps the redacted URL, the fetch finds the whole one again.
        return keep(value) if isinstance(value, str) else [keep(source) for source in value]

    @field_validator("remote")
    @classmethod
    def _remote_without_credentials(cls, value: str) -> str:
        # The remote is recorded on every data version (tags, manifests, DVC config): it may hold no secret.
        if redact_url(value) != value:
            raise ValueError(
                f"{redact_url(value)!r} holds a credential: a DVC remote takes its credentials from DVC's own "
                "config (`dvc remote modify --local`) or the cloud's environment (AWS_*), never from the config "
                "that travels with a model"
            )
        return value

    @model_validator(mode="after")
    def _bounds(self) -> DataConfig:
        if self.min_chars > self.max_chars:
            raise ValueError(f"min_chars ({self.min_chars}) must not exceed max_chars ({self.max_chars})")
        if self.min_mean_word_length > self.max_mean_word_length:
            raise ValueError(
                f"min_mean_word_length ({self.min_mean_word_length}) must not exceed "
                f"max_mean_word_length ({self.max_mean_word_length})"
            )
        if 0.95 < self.near_dup_threshold < 1:  # LSH bands cannot be cut that fine from these signatures
            raise ValueError(
                f"near_dup_threshold ({self.near_dup_threshold}) must be at most 0.95, or 1 to keep near duplicates"
            )
        listed = self.source_list
        for scheme, (holds, why) in BUILTIN_SOURCES.items():
            if holds != self.modality and any(source.startswith(scheme) for source in listed):
                raise ValueError(why)
        if not listed:
            raise ValueError("no source: set data.source or data.sources")
        if len(set(listed)) != len(listed):
            raise ValueError(f"a source is listed twice in {listed}")
        if any(not ext.startswith(".") for ext in self.extensions):
            raise ValueError(f"extensions must start with a dot, e.g. '.txt': {self.extensions}")
        return self

    @property
    def source_list(self) -> list[str]:
        """Every source in reading order: `source` (when set), then `sources`."""
        return ([self.source] if self.source else []) + list(self.sources)
