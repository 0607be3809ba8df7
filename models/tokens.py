"""The special token the model and its tokenizer share (one between documents, where generation stops), and the
tokenizer setting that keeps text from becoming a control token."""

EOT = "<|endoftext|>"


def text_only(tokenizer):
    """`tokenizer` (a `tokenizers.Tokenizer`) set to encode the strings of its special tokens, where a text holds
    them, as the characters they are: a user's or a document's `<|endoftext|>` or `<|user|>` is text, and control
    tokens go in only by id (`ChatTemplate.token_id`, the end-of-text between documents). Set where a tokenizer is
    loaded to encode text that someone else wrote; not saved with the tokenizer."""
    tokenizer.encode_special_tokens = True
    return tokenizer
