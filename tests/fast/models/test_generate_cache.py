"""Generation with the key/value cache and batched rows (`models.kv_cache`): the same tokens as today's uncached,
one-prompt-at-a-time generation, for learned and rotary positions, greedy and seeded sampling, mixed prompt
lengths, rows that stop early, and contexts past block_size."""

from __future__ import annotations

import pytest
import torch
from helpers_tokenizers import plain_tokenizer

from models.chat import ChatTemplate, add_chat_tokens
from models.generate import RowDraws, Sampling, choose, generate_ids, generate_replies, generate_texts
from models.gpt import GPT, GPTConfig, sampling_probs
from models.kv_cache import Decoder

V = 64
PROMPTS = [[1, 2, 3], [4], [5, 6, 7, 8, 9, 10, 11], [12, 13], [14, 15, 16, 17, 18]]
SAMPLING = {"greedy": (1.0, 1), "sampled": (0.9, None), "top_k": (1.3, 8)}
# "+bigram": with a hashed bigram input table, whose rows need each cached token's previous token; "+qknorm+relu2":
# queries and keys normalised per head, ReLU squared in the MLP; "+values": value embeddings, looked up for each new
# token only.
POSITIONS = ["learned", "rotary", "rotary+bigram", "rotary+qknorm+relu2", "rotary+values"]


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Models this small gain nothing from a second thread, and two threads per worker on a busy machine wait
    on each other (tens of milliseconds a token instead of one)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def lively(positions: str, block: int = 32, vocab: int = V, seed: int = 0) -> GPT:
    """A tiny random model whose greedy text varies: its output head is untied and larger than the embedding.
    (Tied to a random embedding, the head mostly predicts the input token again, and greedy text that repeats
    one token proves little.)"""
    torch.manual_seed(seed)
    positions, *extras = positions.split("+")
    cfg = GPTConfig(
        vocab,
        block,
        n_layer=2,
        n_head=2,
        n_embd=32,
        positions=positions,
        bigram_buckets=97 if "bigram" in extras else 0,
        qk_norm="qknorm" in extras,
        mlp_activation="relu2" if "relu2" in extras else "gelu",
        value_embeddings="values" in extras,
    )
    model = GPT(cfg)
    model.lm_head.weight = torch.nn.Parameter(torch.randn(vocab, 32))
    if model.bigram is not None:  # rows as large as the token embeddings', so that a wrong pair changes the text
        model.bigram.weight.data = torch.randn(97, 32)
    for table in model.value_embeds or []:  # large enough to change the text, small enough to keep it varied
        table.weight.data = 0.3 * torch.randn(vocab, 32)
    return model.eval()


def alone(model: GPT, prompt: list[int], n: int, temperature: float, top_k, seed: int, stop) -> list[int]:
    """Today's generation of one prompt: uncached, its own generator, stopping at `stop` (excluded)."""
    generator = torch.Generator().manual_seed(seed)
    out = model.generate(torch.tensor([prompt]), n, temperature, top_k, generator, stop, use_cache=False)
    return [t for t in out[0, len(prompt) :].tolist() if t != stop]


def test_the_bigram_table_changes_what_is_generated():
    """So that the cache tests with "+bigram" can fail: the pairs' rows change the greedy text."""
    model, prompt = lively("rotary+bigram"), torch.tensor([[1, 2, 3, 4]])
    with_pairs = model.generate(prompt, 12, top_k=1)
    model.bigram.weight.data.zero_()
    assert not torch.equal(model.generate(prompt, 12, top_k=1), with_pairs)


def test_value_embeddings_change_what_is_generated():
    """So that the cache tests with "+values" can fail."""
    model, prompt = lively("rotary+values"), torch.tensor([[1, 2, 3, 4]])
    with_values = model.generate(prompt, 12, top_k=1)
    for table in model.value_embeds:
        table.weight.data.zero_()
    assert not torch.equal(model.generate(prompt, 12, top_k=1), with_values)


@pytest.mark.parametrize("positions", POSITIONS)
def test_cached_greedy_is_uncached_greedy(positions):
    model = lively(positions)
    prompt = torch.tensor([[1, 2, 3, 4], [9, 8, 7, 6]])
    uncached = model.generate(prompt, 20, top_k=1, use_cache=False)
    assert len(set(uncached[:, 4:].flatten().tolist())) > 6  # the text varies: the test can tell positions apart
    assert torch.equal(model.generate(prompt, 20, top_k=1), uncached)


@pytest.mark.parametrize("positions", POSITIONS)
def test_cached_logits_match_recomputed_ones_for_padded_rows(positions):
    model = lively(positions)
    decoder = Decoder(model, [list(p) for p in PROMPTS])
    for step in range(6):
        logits = decoder.next_logits()
        for i, row in enumerate(decoder.rows):
            recomputed = model(torch.tensor([row]))[0][0, -1]
            torch.testing.assert_close(logits[i], recomputed, atol=1e-5, rtol=1e-5)
        decoder.push([(3 * step + i) % V for i in range(len(PROMPTS))])


@pytest.mark.parametrize("positions", POSITIONS)
@pytest.mark.parametrize("sampling", SAMPLING)
def test_batched_rows_are_each_prompt_alone(positions, sampling):
    model = lively(positions)
    temperature, top_k = SAMPLING[sampling]
    free = [alone(model, p, 12, temperature, top_k, 5, None) for p in PROMPTS]
    stop = free[0][4]  # a token row 0 draws mid-way: rows stop at different steps
    expected = [alone(model, p, 12, temperature, top_k, 5, stop) for p in PROMPTS]
    assert len({len(e) for e in expected}) > 1  # some rows stopped while others went on
    assert generate_ids(model, PROMPTS, 12, temperature, top_k, 5, stop) == expected


@pytest.mark.parametrize("positions", POSITIONS)
@pytest.mark.parametrize("sampling", ["greedy", "sampled"])
def test_past_block_size_the_window_slides_as_before(positions, sampling):
    model = lively(positions, block=8)
    temperature, top_k = SAMPLING[sampling]
    prompts = [[1, 2, 3], list(range(20, 31)), [4, 5, 6, 7, 8, 9]]  # the second is past the context already
    expected = [alone(model, p, 14, temperature, top_k, 3, None) for p in prompts]
    assert generate_ids(model, prompts, 14, temperature, top_k, 3, None) == expected
    batch = torch.tensor([[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]])
    generator = lambda: torch.Generator().manual_seed(3)  # noqa: E731
    uncached = model.generate(batch, 14, temperature, top_k, generator(), use_cache=False)
    assert torch.equal(model.generate(batch, 14, temperature, top_k, generator()), uncached)


def test_the_cache_is_rebuilt_when_the_rows_left_fit_the_context_again():
    model = lively("rotary", block=8)
    decoder = Decoder(model, [list(range(20, 30)), [1, 2, 3]])
    decoder.next_logits()  # the long row is past the context: windows, no cache
    assert decoder.cache is None
    decoder.push([5, 6])
    decoder.drop([0])
    logits = decoder.next_logits()
    assert decoder.cache is not None and decoder.cache.length == 4
    torch.testing.assert_close(logits[0], model(torch.tensor([[1, 2, 3, 6]]))[0][0, -1], atol=1e-5, rtol=1e-5)


def test_a_stopped_row_leaves_the_cache_and_its_padding_columns():
    model = lively("learned")
    decoder = Decoder(model, [[1, 2, 3, 4, 5, 6], [7, 8]])
    decoder.next_logits()
    decoder.push([9, 10])
    decoder.drop([0])
    assert decoder.active == [1] and decoder.cache.length == 2  # the columns only row 0 filled are gone
    logits = decoder.next_logits()
    torch.testing.assert_close(logits[0], model(torch.tensor([[7, 8, 10]]))[0][0, -1], atol=1e-5, rtol=1e-5)


def test_greedy_breaks_a_tie_with_the_draw_generation_alone_makes_there():
    """Greedy steps without a tie take the largest logit without drawing; a later tie draws from the generator
    as the earlier steps' draws left it, as `GPT.generate` (one draw per token) does."""
    steps = [torch.randn(1, V, generator=torch.Generator().manual_seed(i)) for i in range(3)]
    steps.append(torch.zeros(1, V))  # every token tied
    broken, fresh = [], []
    for seed in range(8):
        today = torch.Generator().manual_seed(seed)
        expected = [int(torch.multinomial(sampling_probs(s.clone(), 1.0, 1), 1, generator=today)) for s in steps]
        draws = RowDraws(seed)
        assert [choose(s.clone(), 1.0, 1, [draws])[0] for s in steps] == expected
        assert draws.skipped == 0  # the tie replayed the three skipped draws
        broken.append(expected[-1])
        fresh.append(choose(steps[-1].clone(), 1.0, 1, [RowDraws(seed)])[0])
    assert broken != fresh  # without the skipped draws the tie would break differently


@pytest.fixture(scope="module")
def chat_tokenizer():
    tokenizer = plain_tokenizer()
    add_chat_tokens(tokenizer, ChatTemplate())
    return tokenizer


@pytest.mark.parametrize("top_k", [1, 20])
def test_generate_replies_batched_is_one_by_one(chat_tokenizer, top_k):
    model = lively("rotary", block=64, vocab=chat_tokenizer.get_vocab_size(), seed=0)
    template = ChatTemplate()
    chats = [
        [{"role": "user", "content": "add two and three"}],
        [{"role": "system", "content": "river"}, {"role": "user", "content": "stone light, add two: five"}],
        [{"role": "user", "content": "five"}],
    ]
    one_by_one = [
        generate_replies(model, chat_tokenizer, template, [c], Sampling(16, 0.8, top_k, 11))[0] for c in chats
    ]
    assert len(set(one_by_one)) == len(chats)
    assert generate_replies(model, chat_tokenizer, template, chats, Sampling(16, 0.8, top_k, 11)) == one_by_one


def test_generate_texts_batched_is_one_by_one(chat_tokenizer):
    model = lively("learned", block=64, vocab=chat_tokenizer.get_vocab_size(), seed=2)
    prompts = ["river stone", "", "add two and three: five, river stone light"]
    one_by_one = [generate_texts(model, chat_tokenizer, [p], Sampling(12, 0.8, 40, 4))[0] for p in prompts]
    assert generate_texts(model, chat_tokenizer, prompts, Sampling(12, 0.8, 40, 4)) == one_by_one
    eot = chat_tokenizer.token_to_id("<|endoftext|>")
    today = [
        chat_tokenizer.decode(alone(model, chat_tokenizer.encode(p).ids or [eot], 12, 0.8, 40, 4, eot)) for p in prompts
    ]
    assert one_by_one == today
