"""The `search` section of the config: a space of config keys, a budget, a sampler and a pruner.

Each dimension names a dotted config key and a distribution. The space is checked against the rest of
the config when the config loads: the key must exist and be searchable, and the bounds or choices must
be values that key accepts, so a typo fails before any trial is trained.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from foundry.core.redact import keep

# Sections a trial may change. `tokenizer` keys change the dataset, so each of their values is prepared
# (once) before the trials; `data` keys would change the holdout itself, and trials would not compare.
SEARCHABLE = ("model", "train", "tokenizer")
# Keys that would change how a trial runs, not what it learns, or that a trial cannot honour.
NOT_SEARCHABLE = {
    "train.num_nodes",
    "train.devices",
    "train.strategy",
    "train.accelerator",
    "train.init_from",
    "train.retries",
    "train.max_restarts",
    "train.preempt_grace_s",
    "train.cpu_threads",
    "train.val_every_n_steps",
    "train.val_batches",
    "tokenizer.from_file",
    "tokenizer.max_train_bytes",
}
Choice = str | int | float | bool


class SearchParam(BaseModel):
    """One dimension: `log_uniform`/`uniform` floats and `int` between low and high, or `categorical` choices."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    key: str = Field(description="A dotted config key, e.g. train.learning_rate.")
    distribution: Literal["log_uniform", "uniform", "int", "categorical"] = Field(
        description="How values are drawn: log_uniform or uniform floats and int whole numbers between low and high, "
        "or categorical, one of choices."
    )
    low: int | float | None = Field(None, description="Lower bound (log_uniform, uniform, int), inclusive.")
    high: int | float | None = Field(None, description="Upper bound (log_uniform, uniform, int), inclusive.")
    choices: list[Choice] = Field([], description="The values a categorical dimension takes.")

    @model_validator(mode="before")
    @classmethod
    def _known_fields(cls, raw: Any) -> Any:
        # Named here rather than by the config's error text, which lists the keys of the section.
        if isinstance(raw, dict) and (unknown := sorted(set(raw) - set(cls.model_fields))):
            raise ValueError(f"unknown field(s) {unknown}; a dimension has: {', '.join(cls.model_fields)}")
        return raw

    @model_validator(mode="after")
    def _shape(self) -> SearchParam:
        where = f"{self.key} ({self.distribution})"
        if self.distribution == "categorical":
            if not self.choices or self.low is not None or self.high is not None:
                raise ValueError(f"{where} takes `choices` (at least one) and no low/high")
            if len(set(map(repr, self.choices))) != len(self.choices):
                raise ValueError(f"{where} lists a choice twice: {self.choices}")
            return self
        if self.choices or self.low is None or self.high is None:
            raise ValueError(f"{where} takes `low` and `high`, and no choices")
        if not self.low < self.high:
            raise ValueError(f"{where}: low ({self.low}) must be below high ({self.high})")
        if self.distribution == "log_uniform" and self.low <= 0:
            raise ValueError(f"{where}: low ({self.low}) must be positive on a log scale")
        if self.distribution == "int" and not (float(self.low).is_integer() and float(self.high).is_integer()):
            raise ValueError(f"{where}: low and high must be whole numbers")
        return self

    @property
    def section(self) -> str:
        return self.key.partition(".")[0]

    def bounds(self) -> list[Any]:
        """The values at the edges of this dimension: what a config must accept for the space to be valid."""
        if self.distribution == "categorical":
            return list(self.choices)
        if self.distribution == "int":
            return [int(self.low), int(self.high)]  # type: ignore[arg-type]
        return [self.low, self.high]

    def contains(self, value: Any) -> bool:
        if self.distribution == "categorical":
            return any(value == c and isinstance(value, bool) == isinstance(c, bool) for c in self.choices)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        return self.low <= value <= self.high and (self.distribution != "int" or float(value).is_integer())  # type: ignore[operator]


def _default_space() -> list[SearchParam]:
    """What a trained model's quality depends on most here; every width divides by the default 3 heads into an even
    head size."""
    return [
        SearchParam(key="train.learning_rate", distribution="log_uniform", low=1e-3, high=3e-2),
        SearchParam(key="train.batch_size", distribution="categorical", choices=[16, 32, 64]),
        SearchParam(key="model.n_layer", distribution="int", low=2, high=6),
        SearchParam(key="model.n_embd", distribution="categorical", choices=[96, 144, 192, 288, 384]),
        SearchParam(key="model.block_size", distribution="categorical", choices=[64, 128, 256]),
        SearchParam(key="tokenizer.vocab_size", distribution="categorical", choices=[2048, 4096, 8192]),
    ]


class SearchConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    space: list[SearchParam] = Field(
        default_factory=_default_space,
        description="The dimensions searched: for each a dotted config key and its distribution. Keys of "
        "model, train and tokenizer; tokenizer keys only as categorical (each value is a dataset).",
    )
    n_trials: int = Field(
        20, ge=0, description="Trials the study runs in all, over every invocation (0: no limit, set timeout_s)."
    )
    timeout_s: float = Field(0, ge=0, description="Stop starting trials after this many seconds (0: no limit).")
    trial_max_steps: int = Field(
        0, ge=0, description="train.max_steps of every trial (0: the config's own); with a time box, its ceiling."
    )
    trial_time_s: float = Field(
        0,
        ge=0,
        description="Time-box each trial's training: its length (and its schedule's end) is fitted to this many "
        "seconds from its first steps' speed, and the best config keeps the steps its trial ran (0: no box).",
    )
    val_every_n_steps: int = Field(
        0, ge=0, description="Validation, and so pruning reports, every N steps in trials (0: train.val_every_n_steps)."
    )
    workers: int = Field(1, ge=1, description="Trials at once: Dask workers, each pinned to its share of the cores.")
    scheduler: str = Field(
        "",
        pattern=r"^(|(tcp|tls|ws|wss|inproc|ucx)://\S+)$",
        description="'' (a local Dask cluster of `workers` processes) or the address of an existing Dask "
        "scheduler, whose workers see the same files and the same study storage.",
    )
    storage: str = Field(
        "",
        description="Optuna storage: '' (a journal file under $FOUNDRY_HOME/search/), a journal file path, or a "
        "database URL (sqlite:///..., postgresql://...).",
    )
    study_name: str = Field(
        "foundry-search",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$",
        description="The study's name in its storage and its folder under $FOUNDRY_HOME/search/; running the same "
        "name again continues the study.",
    )
    sampler: Literal["tpe", "random"] = Field(
        "tpe",
        description="How trials' values are chosen: tpe (Optuna's TPE, after startup_trials random trials) or "
        "random; either seeded by seed.",
    )
    startup_trials: int = Field(5, ge=1, description="Random trials before TPE starts modelling the results.")
    pruner: Literal["median", "successive_halving", "none"] = Field(
        "median",
        description="How trials are stopped early on their validation losses: median (worse than the median of "
        "earlier trials at the same step), successive_halving, or none.",
    )
    pruner_startup_trials: int = Field(3, ge=0, description="Median: trials finished before any is pruned.")
    pruner_warmup_steps: int = Field(
        0, ge=0, description="Median: steps before a trial may be pruned; successive halving: its min resource."
    )
    seed: int = Field(0, description="The sampler's seed: the same seed suggests the same trials.")
    baseline_first: bool = Field(
        True, description="The study's first trial is the config's own values, when they lie in the space."
    )

    @field_validator("storage")
    @classmethod
    def _no_password(cls, value: str) -> str:
        # A database password stays out of everything the config is saved into (foundry.core.redact).
        return keep(value)

    @model_validator(mode="after")
    def _budget(self) -> SearchConfig:
        if not self.n_trials and not self.timeout_s:
            raise ValueError("no budget: set n_trials or timeout_s (or both)")
        keys = [p.key for p in self.space]
        if len(set(keys)) != len(keys):
            raise ValueError(f"a key is searched twice: {keys}")
        return self


def search_fits_config(search: SearchConfig, info: ValidationInfo, skip: set[str] = frozenset()) -> SearchConfig:
    """The config's validator of its `search` section, which comes last: every other section is validated
    by then (`info.data`), so each dimension is checked against the key it names; a dimension on a section
    in `skip` (one that failed its own validation) is not."""
    problems = [
        p
        for i, param in enumerate(search.space)
        if param.key.partition(".")[0] not in skip and (p := _dimension_problem(i, param, info.data))
    ]
    if problems:
        raise PydanticCustomError("named_key", "; ".join(problems))
    return search


def _dimension_problem(index: int, param: SearchParam, sections: dict[str, Any]) -> str:
    where = f"search.space.{index} ({param.key})"
    section, _, name = param.key.partition(".")
    if section not in sections or "." in name or name not in type(sections[section]).model_fields:
        return f"{where}: not a config key; searchable sections: {', '.join(SEARCHABLE)}"
    if section not in SEARCHABLE or param.key in NOT_SEARCHABLE:
        return f"{where}: not searchable (a trial must keep it, or it changes the holdout)"
    if section == "tokenizer" and param.distribution != "categorical":
        return f"{where}: tokenizer keys must be categorical (each value is a dataset prepared before the trials)"
    info = type(sections[section]).model_fields[name]
    if param.distribution == "int" and info.annotation is not int:
        return f"{where}: an int distribution on a key of type {getattr(info.annotation, '__name__', info.annotation)}"
    adapter = TypeAdapter(Annotated[(info.annotation, *info.metadata)])
    for value in param.bounds():
        try:
            adapter.validate_python(value)
        except ValidationError as exc:
            return f"{where}: {value!r} is not a value of {param.key}: {exc.errors()[0]['msg']}"
    return ""


def base_values(search: SearchConfig, config: BaseModel) -> dict[str, Any] | None:
    """The config's own values of the searched keys, or None when one lies outside its dimension."""
    values = {p.key: getattr(getattr(config, p.section), p.key.partition(".")[2]) for p in search.space}
    return values if all(p.contains(values[p.key]) for p in search.space) else None
