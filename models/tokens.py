"""The special token the model and its tokenizer share: one between documents, where generation stops."""

EOT = "<|endoftext|>"
