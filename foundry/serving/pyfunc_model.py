"""The registered model: prompts or chats in, generated text out, through `mlflow.pyfunc.load_model`.

A leaf: this file and the `models` package are the model's code. MLflow copies both into every
version it logs (models-from-code, `code_paths`) and runs this file to load it, so a version loads
in any environment holding its logged requirements (torch, tokenizers, pandas, mlflow), with no
Foundry checkout. Import nothing else here.

Each row holds a `prompt` (text) or `messages` (a chat: [{"role": ..., "content": ...}]). An aligned
version applies its chat template itself: messages render as the conversation, a prompt as one user
turn, and the completion is the assistant's reply. A version never aligned continues a prompt's text.

A request is checked before any generation: its rows, each row's text and the sampling parameters,
against the limits saved with the version (its `model_config`; `LIMITS` for a version logged before
there were any). A refusal is an `MlflowException` of INVALID_PARAMETER_VALUE, which the scoring
server answers with HTTP 400; its message names the field and the limit; a chat's turns are counted before any is
read, and a chat is encoded turn by turn only as far as the context holds it. All rows of a request are generated in
one call, and generation stops at the version's `max_request_s`: DEADLINE_EXCEEDED (HTTP 504) naming it. A request's
text is encoded as text (`models.tokens.text_only`): a user's `<|endoftext|>` or `<|user|>` is never the control
token, which only the template puts in, by id.

A request that names one of the chat-completions fields (`model`, `max_tokens`, `max_completion_tokens`,
`n`, `stream`: OpenAI's names, optional columns of the signature) beside its `messages` is one chat
answered in that shape: a `chat.completion` (MLflow's `ChatCompletionResponse`) with the reply, why it
ended ("stop" at the end marker, "length" at `max_tokens`) and the tokens counted. The scoring server
hands such a body (`{"messages": [...], "max_tokens": 32, "temperature": 0}`, not wrapped in
`dataframe_records`) to `predict` as one row, and answers with what `predict` returns, unwrapped.

Two methods beside `predict`, which `foundry serve-model` (foundry/serving/http.py) calls and MLflow's scoring server
does not: `stream_chat`, a chat-completions request answered as `chat.completion.chunk`s generated as they are
iterated (`stream: true`), and `complete_text`, OpenAI's `/v1/completions` (a prompt continued as text, `logprobs`,
`echo`, streamed or not). Both check a request as `predict` does, against the same limits, before generating.
"""

import mlflow.pyfunc
import pandas as pd
from mlflow.exceptions import MlflowException
from mlflow.models import set_model
from mlflow.protos.databricks_pb2 import DEADLINE_EXCEEDED

from models.chat import ROLES, saved_template
from models.chat_completion import Chunks, Reply, ReplyStream, chat_chunks, chat_stream, complete_chat
from models.generate import Sampling, deadline_after, generate_ids, generate_replies, generate_texts, prompt_ids
from models.gpt import gpt_from_saved, load_saved
from models.request_limits import CHAT_COMPLETION_FIELDS, DEFAULTS, LIMITS, TimeLimit, saved_limits
from models.text_completion import (
    chat_logprobs,
    completion_logprobs,
    text_chunks,
    text_completion,
    token_counts,
    token_logprobs,
)
from models.tokens import EOT, text_only

SEEDS = (-(2**63), 2**64 - 1)  # what torch.Generator.manual_seed takes
MAX_STOPS, MAX_STOP_CHARS = 4, 256  # OpenAI's bound on `stop` strings; a length that keeps the search cheap
MAX_TOP_LOGPROBS = 20  # the likeliest tokens a completion lists at each position, at most (OpenAI's chat bound)


def refused(message: str) -> MlflowException:
    return MlflowException.invalid_parameter_value(message)


class InTime:  # a class, not `contextlib.contextmanager`: the leaf imports nothing but its runtime
    """Generation stopped at the request's deadline (`TimeLimit`) raised as a refusal: DEADLINE_EXCEEDED, which the
    scoring server answers with HTTP 504, naming the limit and the field that sets the work (`max_tokens`)."""

    def __init__(self, limits: dict[str, int]):
        self.limits = limits

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, exc, traceback) -> None:
        if isinstance(exc, TimeLimit):
            message = (
                f"max_tokens: generation ran past this version's {self.limits['max_request_s']} s per request "
                f"(serving.max_request_s) and was stopped after {exc.tokens} tokens; ask for fewer tokens or rows"
            )
            raise MlflowException(message, error_code=DEADLINE_EXCEEDED) from None


def timed(chunks: Chunks, limits: dict[str, int]) -> Chunks:
    """`chunks` (generated as iterated), a `TimeLimit` while iterating raised as `InTime` raises it."""
    with InTime(limits):
        yield from chunks


def _present(value) -> bool:
    return value is not None and not (pd.api.types.is_scalar(value) and pd.isna(value))


def _plain(value):
    """A numpy scalar (what a frame holds) as Python's own, so that a message shows `2`, not `np.int64(2)`."""
    return value.item() if hasattr(value, "item") and pd.api.types.is_scalar(value) else value


def _whole(value, field: str) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        number = None
    if number is None or isinstance(value, bool) or number != value:
        raise refused(f"{field} = {value!r}: must be a whole number")
    return number


def sampling(params: dict | None, limits: dict[str, int], length: tuple[str, object] | None = None) -> Sampling:
    """The sampling a request asks for (max_new_tokens, temperature, top_k, seed), checked; absent ones take their
    defaults; generation stops `max_request_s` (the version's limit) from now at the latest.
    `length`: (field, value) of a chat-completions request's `max_tokens`, which then stands for max_new_tokens."""
    given = {**DEFAULTS, "max_new_tokens": min(DEFAULTS["max_new_tokens"], limits["max_new_tokens"])}
    given.update({k: v for k, v in (params or {}).items() if v is not None})
    length_field = "params.max_new_tokens"
    if length is not None:
        length_field, given["max_new_tokens"] = length
    max_new_tokens = _whole(given["max_new_tokens"], length_field)
    top_k, seed = (_whole(given[name], f"params.{name}") for name in ("top_k", "seed"))
    if not 1 <= max_new_tokens <= limits["max_new_tokens"]:
        raise refused(
            f"{length_field} = {max_new_tokens}: must be between 1 and {limits['max_new_tokens']}, this version's limit"
        )
    try:
        temperature = float(given["temperature"])
    except (TypeError, ValueError):
        temperature = float("nan")
    if not 0 <= temperature < float("inf"):  # NaN fails both comparisons
        raise refused(f"params.temperature = {given['temperature']!r}: must be a number >= 0 (0: greedy)")
    if top_k < 0:
        raise refused(f"params.top_k = {top_k}: must be >= 1, or 0 for no top-k cut")
    if not SEEDS[0] <= seed <= SEEDS[1]:
        raise refused(f"params.seed = {seed}: must be between {SEEDS[0]} and {SEEDS[1]}")
    deadline = deadline_after(limits.get("max_request_s", LIMITS["max_request_s"]))
    return Sampling(max_new_tokens, temperature, top_k or None, seed, deadline)


def _messages(row: int, messages, max_turns: int) -> list[dict]:
    """A row's chat as plain dicts: each turn a known role and text, at least one user turn, at most `max_turns`
    (counted before any turn is looked at)."""
    where = f"row {row}: messages"
    if isinstance(messages, str | bytes | dict) or not hasattr(messages, "__len__"):
        raise refused(f"{where} must be a list of {{role, content}}, not {type(messages).__name__}")
    if len(messages) > max_turns:
        raise refused(f"{where} hold {len(messages)} turns; this version takes at most {max_turns} (serving.max_turns)")
    chat = []
    for turn in messages:
        if not isinstance(turn, dict) or not isinstance(turn.get("content"), str) or turn.get("role") not in ROLES:
            raise refused(f"{where}: each turn needs a role ({', '.join(ROLES)}) and a text content; got {turn!r:.80}")
        chat.append({"role": turn["role"], "content": turn["content"]})
    if not any(turn["role"] == "user" for turn in chat):
        raise refused(f"{where} hold no user turn: a chat needs one to answer")
    return chat


def checked_rows(model_input, limits: dict[str, int]) -> list[dict]:
    """The request's rows, each {"prompt": str} or {"messages": [...]}, within the version's limits."""
    if not isinstance(model_input, pd.DataFrame):
        raise refused(
            f"the input must be rows of `prompt` or `messages` (dataframe_records, dataframe_split), "
            f"not {type(model_input).__name__}"
        )
    if len(model_input) == 0:  # MLflow drops the columns its signature does not name, and a list's items
        raise refused("rows: no rows with a `prompt` or `messages` (other columns are dropped); send 1 or more")
    if len(model_input) > limits["max_rows"]:
        raise refused(f"rows: {len(model_input)} rows; a request holds 1 to {limits['max_rows']}, this version's limit")
    rows = []
    for i, row in enumerate(model_input.to_dict("records")):
        if _present(row.get("messages")):
            rows.append({"messages": _messages(i, row["messages"], limits["max_turns"])})
            text = sum(len(turn["content"]) for turn in rows[-1]["messages"])
        elif isinstance(row.get("prompt"), str):
            rows.append({"prompt": row["prompt"]})
            text = len(row["prompt"])
        else:
            raise refused(f"row {i}: needs a prompt (text) or messages (a list of {{role, content}})")
        if text > limits["max_prompt_chars"]:
            field = next(iter(rows[-1]))
            raise refused(
                f"row {i}: {field} holds {text} characters; this version takes at most {limits['max_prompt_chars']}"
            )
    return rows


def completion_request(model_input) -> dict | None:
    """A chat-completions request's own fields, checked ({"length": (field, value) or None, "model": ...}); None
    for a request of Foundry's rows, which names none of them."""
    if not isinstance(model_input, pd.DataFrame):
        return None
    named = {
        name: _plain(model_input[name].iloc[0])
        for name in CHAT_COMPLETION_FIELDS
        if name in model_input.columns and model_input[name].map(_present).any()
    }
    if not named:
        return None
    first = next(iter(named))
    has_messages = "messages" in model_input.columns and _present(model_input["messages"].iloc[0])
    has_prompt = "prompt" in model_input.columns and _present(model_input["prompt"].iloc[0])
    if len(model_input) != 1 or not has_messages or has_prompt:
        raise refused(
            f"{first}: a chat-completions request is one chat, `messages` with its fields beside it "
            f"({', '.join(CHAT_COMPLETION_FIELDS)}); rows of prompts take params.max_new_tokens instead"
        )
    if named.get("n", 1) != 1:
        raise refused(f"n = {named['n']!r}: this model answers one choice per request; send n = 1 or leave it out")
    if named.get("stream", False) is not False:
        raise refused(f"stream = {named['stream']!r}: answers are not streamed; send stream = false or leave it out")
    lengths = {name: named[name] for name in ("max_tokens", "max_completion_tokens") if name in named}
    if len(set(lengths.values())) > 1:
        raise refused(f"max_tokens = {lengths['max_tokens']!r} and max_completion_tokens differ; send one of them")
    model = named.get("model")
    return {"length": next(iter(lengths.items()), None), "model": None if model is None else str(model)}


def chat_completion(reply, model: str | None) -> dict:
    """A `Reply` (models.chat_completion) in the chat-completions answer's shape."""
    from mlflow.types.llm import ChatChoice, ChatCompletionResponse, ChatMessage, TokenUsageStats

    return ChatCompletionResponse(
        id=reply.id,
        model=model,
        choices=[
            ChatChoice(
                index=0,
                message=ChatMessage(role="assistant", content=reply.text),
                finish_reason=reply.finish_reason,
            )
        ],
        usage=TokenUsageStats(
            prompt_tokens=reply.prompt_tokens,
            completion_tokens=reply.completion_tokens,
            total_tokens=reply.total_tokens,
        ),
    ).to_dict()


def stop_strings(stop) -> tuple[str, ...]:
    """OpenAI's `stop`: None, a text, or a list of up to `MAX_STOPS` texts, each 1 to `MAX_STOP_CHARS` characters."""
    stops = () if stop is None else (stop,) if isinstance(stop, str) else stop
    fits = isinstance(stops, list | tuple) and len(stops) <= MAX_STOPS
    if not fits or not all(isinstance(s, str) and 1 <= len(s) <= MAX_STOP_CHARS for s in stops):
        raise refused(
            f"stop = {stop!r:.80}: must be a text or a list of up to {MAX_STOPS} texts, "
            f"each 1 to {MAX_STOP_CHARS} characters"
        )
    return tuple(stops)


def chat_logprobs_option(body: dict) -> int | None:
    """A chat request's `logprobs` (true or false) and `top_logprobs` (0 to `MAX_TOP_LOGPROBS`, with logprobs):
    how many likeliest tokens to list, or None for no log-probabilities."""
    wanted, top = body.get("logprobs"), body.get("top_logprobs")
    if wanted is not None and not isinstance(wanted, bool):
        raise refused(f"logprobs = {wanted!r:.40}: must be true or false (top_logprobs says how many)")
    if top is not None and (isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= MAX_TOP_LOGPROBS):
        raise refused(f"top_logprobs = {top!r:.40}: must be a whole number from 0 to {MAX_TOP_LOGPROBS}")
    if top is not None and not wanted:
        raise refused("top_logprobs: needs logprobs = true")
    return (top or 0) if wanted else None


def _prompts(prompt, limits: dict[str, int]) -> list[str]:
    """A completions request's prompts (a text, or a list of 1 to `max_rows` texts), each within the character
    limit."""
    prompts = [prompt] if isinstance(prompt, str) else prompt
    if not isinstance(prompts, list) or not prompts or not all(isinstance(p, str) for p in prompts):
        shown = repr(prompt)[:80]
        raise refused(f"prompt = {shown}: must be a text or a list of texts (token ids are not taken: send text)")
    if len(prompts) > limits["max_rows"]:
        raise refused(
            f"prompt: {len(prompts)} prompts; a request holds 1 to {limits['max_rows']}, this version's limit"
        )
    for i, text in enumerate(prompts):
        if len(text) > limits["max_prompt_chars"]:
            raise refused(
                f"prompt: prompt {i} holds {len(text)} characters; this version takes at most {limits['max_prompt_chars']}"
            )
    return prompts


def _completion_options(body: dict) -> tuple[int | None, bool]:
    """`logprobs` (how many likeliest tokens to list at each position, or None: no log-probabilities) and `echo`."""
    top, echo = body.get("logprobs"), body.get("echo", False)
    if top is not None and (isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= MAX_TOP_LOGPROBS):
        raise refused(f"logprobs = {top!r:.40}: must be a whole number from 0 to {MAX_TOP_LOGPROBS}")
    if not isinstance(echo, bool):
        raise refused(f"echo = {echo!r:.40}: must be true or false")
    if body.get("n", 1) != 1:
        raise refused(f"n = {body['n']!r:.40}: this model answers one choice per prompt; send n = 1")
    return top, echo


class GPTTextGenerator(mlflow.pyfunc.PythonModel):
    """Loads the `checkpoint` (model.pt) and `tokenizer` (tokenizer.json) artifacts; generates on CPU."""

    def load_context(self, context) -> None:
        from tokenizers import Tokenizer

        saved = load_saved(context.artifacts["checkpoint"])
        self.model = gpt_from_saved(saved)
        self.template = saved_template(saved)  # None: a version never aligned
        # Every request's text is the user's: its `<|endoftext|>` or `<|user|>` is text, never a control token.
        self.tokenizer = text_only(Tokenizer.from_file(context.artifacts["tokenizer"]))
        # A version unpickled from before models-from-code has no model_config attribute on its context.
        self.limits = saved_limits(getattr(context, "model_config", None))

    def _chats(self, rows: list[dict]) -> list[list[dict]]:
        """Each row as a conversation the template renders (a prompt as one user turn), checked row by row."""
        chats = [row.get("messages") or [{"role": "user", "content": row["prompt"]}] for row in rows]
        for i, (row, chat) in enumerate(zip(rows, chats, strict=True)):
            try:
                prompt_ids(self.model, self.tokenizer, self.template, chat)
            except ValueError as exc:  # what the template cannot render or the context cannot hold
                raise refused(f"row {i}: {next(iter(row))}: {exc}") from None
        return chats

    def _generate(self, rows: list[dict], sampling: Sampling) -> list[str]:
        if self.template is not None:
            return generate_replies(self.model, self.tokenizer, self.template, self._chats(rows), sampling)
        for i, row in enumerate(rows):
            if "messages" in row:
                raise refused(
                    f"row {i}: messages: this version was never aligned and has no chat template; send a prompt"
                )
        return generate_texts(self.model, self.tokenizer, [row["prompt"] for row in rows], sampling)

    def _chat_request(self, model_input: pd.DataFrame, request: dict, params, limits: dict[str, int]):
        """The one chat of a chat-completions request and its sampling, checked."""
        if self.template is None:
            raise refused("messages: this version was never aligned and has no chat template: it answers prompts only")
        chosen = sampling(params, limits, request["length"])
        [chat] = self._chats(checked_rows(model_input, limits))
        return chat, chosen

    def _complete(self, model_input: pd.DataFrame, request: dict, params, limits: dict[str, int]) -> dict:
        chat, chosen = self._chat_request(model_input, request, params, limits)
        return chat_completion(complete_chat(self.model, self.tokenizer, self.template, chat, chosen), request["model"])

    def stream_chat(self, body: dict, include_usage: bool = False) -> Chunks:
        """A chat-completions request (`body`: OpenAI's fields, `stream` and `stream_options` taken out), answered
        as `chat.completion.chunk`s generated as they are iterated: the same checks as `predict` (refused now, before
        any chunk) and the same reply, piece by piece (`chat_chunks`), as far as a `stop` string. Not part of pyfunc's
        `predict`: `foundry serve-model` calls it for `stream: true`."""
        if chat_logprobs_option(body) is not None:
            raise refused("logprobs: a streamed reply comes without log-probabilities; send stream = false for them")
        reply, model = self._reply_stream(body)
        return timed(chat_chunks(reply, model, include_usage), getattr(self, "limits", LIMITS))

    def answer_chat(self, body: dict) -> dict:
        """A chat-completions request answered whole (`chat.completion`), with what `predict`'s signature does not
        take: `stop`, and `logprobs` (each reply token's log-probability, `top_logprobs` the likeliest at its
        position). The same checks and the same reply as `stream_chat`."""
        top = chat_logprobs_option(body)
        stream, model = self._reply_stream(body)
        with InTime(getattr(self, "limits", LIMITS)):
            for _ in stream:  # generated as iterated
                pass
        answer = chat_completion(stream.reply, model)
        if top is not None:
            try:
                scored = token_logprobs(self.model, stream.ids + stream.tokens, len(stream.ids), top)
            except ValueError as exc:
                raise refused(f"logprobs: the chat and its reply: {exc}") from None
            answer["choices"][0]["logprobs"] = chat_logprobs(self.tokenizer, scored)
        return answer

    def _reply_stream(self, body: dict) -> tuple[ReplyStream, str | None]:
        """The request's reply, to generate, and the model name to answer with; checked as `predict` checks."""
        limits = getattr(self, "limits", LIMITS)
        columns = {name: body[name] for name in ("messages", *CHAT_COMPLETION_FIELDS) if name in body}
        model_input = pd.DataFrame([{**columns, "stream": False}])
        request = completion_request(model_input)
        params = {name: body[name] for name in DEFAULTS if name in body}
        stops = stop_strings(body.get("stop"))
        chat, chosen = self._chat_request(model_input, request, params, limits)
        return chat_stream(self.model, self.tokenizer, self.template, chat, chosen, stops), request["model"]

    def complete_text(self, body: dict, stream: bool = False, include_usage: bool = False) -> dict | Chunks:
        """A completions request (`body`: OpenAI's fields, `stream` and `stream_options` taken out): each prompt
        continued as text (an aligned version's too: no template), until end-of-text or `max_tokens`, answered as a
        `text_completion` (`stream`: its chunks, generated as they are iterated; one prompt, no `logprobs`). With
        `logprobs`, each token's log-probability and the likeliest ones at its position; with `echo`, the prompt's
        too, and its text before the completion. Checked as `predict` checks a request, refused before anything is
        generated. Not part of pyfunc's `predict`: `foundry serve-model` calls it for `/v1/completions`."""
        limits = getattr(self, "limits", LIMITS)
        prompts = _prompts(body.get("prompt"), limits)
        top, echo = _completion_options(body)
        stops = stop_strings(body.get("stop"))
        length = ("max_tokens", body["max_tokens"]) if body.get("max_tokens") is not None else None
        chosen = sampling({name: body[name] for name in DEFAULTS if name in body}, limits, length)
        eot = self.tokenizer.token_to_id(EOT)
        encoded = [self.tokenizer.encode(text).ids or [eot] for text in prompts]
        model = None if body.get("model") is None else str(body["model"])
        if stream:
            if len(prompts) != 1 or top is not None:
                field = "prompt" if len(prompts) != 1 else "logprobs"
                raise refused(f"{field}: a streamed completion is one prompt, without logprobs; send stream = false")
            replies = ReplyStream(self.model, encoded[0], eot, self.tokenizer.decode, chosen, "cmpl", stops)
            return timed(text_chunks(replies, model, include_usage, prompts[0] if echo else ""), limits)
        with InTime(limits):
            generated = self._continuations(encoded, chosen, stops)
        choices = [
            self._text_choice(i, text, ids, reply, top, echo)
            for i, (text, ids, reply) in enumerate(zip(prompts, encoded, generated, strict=True))
        ]
        counted = sum(reply.completion_tokens for _, reply in generated)
        return text_completion(model, choices, token_counts(sum(map(len, encoded)), counted))

    def _continuations(self, encoded: list[list[int]], chosen: Sampling, stops: tuple[str, ...]) -> list[tuple]:
        """Each prompt's generated tokens and its `Reply` (text, finish reason, counts): all prompts together, or
        with `stops`, each alone as far as its first stop string."""
        eot, decode, s = self.tokenizer.token_to_id(EOT), self.tokenizer.decode, chosen
        if stops:
            streams = [ReplyStream(self.model, ids, eot, decode, chosen, stops=stops) for ids in encoded]
            for stream in streams:
                for _ in stream:  # generated as iterated
                    pass
            return [(stream.tokens, stream.reply) for stream in streams]
        out = []
        for ids, tokens in zip(
            encoded,
            generate_ids(self.model, encoded, s.max_new_tokens, s.temperature, s.top_k, s.seed, eot, s.deadline),
            strict=True,
        ):
            stopped = len(tokens) < s.max_new_tokens
            reason = "stop" if stopped else "length"
            out.append((tokens, Reply(decode(tokens), reason, len(ids), len(tokens) + int(stopped))))
        return out

    def _text_choice(self, i: int, prompt: str, ids: list[int], generated: tuple, top, echo: bool) -> dict:
        tokens, reply = generated
        choice = {"text": (prompt if echo else "") + reply.text, "index": i, "logprobs": None}
        choice["finish_reason"] = reply.finish_reason
        if top is not None:
            try:
                scored = token_logprobs(self.model, ids + tokens, 0 if echo else len(ids), top)
            except ValueError as exc:
                raise refused(f"logprobs: prompt {i} and its completion: {exc}") from None
            choice["logprobs"] = completion_logprobs(self.tokenizer, scored, 0 if echo else len(prompt))
        return choice

    # Hinted as a DataFrame, which MLflow does not infer from: the explicit signature applies.
    def predict(self, context, model_input: pd.DataFrame, params=None) -> pd.DataFrame | dict:
        limits = getattr(self, "limits", LIMITS)
        request = completion_request(model_input)
        with InTime(limits):
            if request is not None:
                return self._complete(model_input, request, params, limits)
            chosen = sampling(params, limits)
            return pd.DataFrame({"completion": self._generate(checked_rows(model_input, limits), chosen)})


# MLflow runs this file to load a version: it takes the model from here.
set_model(GPTTextGenerator())
