"""Stage B, the model: pure PyTorch and Lightning, no Prefect, MLflow, DVC or paths.

- `gpt`: the GPT (nanoGPT-shaped), rotary or learned positions, and `load_gpt`
- `lit_base`: the Lightning lifecycle every LightningModule shares: optimizer, schedule, clipping, logging windows
- `lit_gpt`: the LightningModule of pretraining: the next-token loss around `GPT`
- `decay`: which parameters weight decay applies to
- `optim`: Muon for the blocks' matrices and AdamW for the rest, as one optimizer
- `data`: resumable batches of next-token windows over a token array
- `tokens`: the end-of-text token the model and its tokenizer share
- `generate`: seeded text generation, all rows of a call at once
- `kv_cache`: the key/value cache and left-padded rows that generation extends one token at a time
- `batching`: many requests' rows generated together by one engine thread (a server's continuous batching)
- `request_limits`: defaults and bounds of one generation request (no torch: the config reads them)
- `image_input`: a request's image decoded and fitted as the data stage staged the training images
- `chat`: the chat template, one rendering for training, evaluation and serving
- `chat_completion`: one reply to one chat with its token counts and finish reason (a chat-completions answer),
  and the same reply streamed piece by piece as it is generated
- `text_completion`: a text's own token log-probabilities, for a completions answer's `logprobs`
- `align`: the SFT and DPO losses
- `lit_align`: their LightningModules (`LitSFT`, `LitDPO`)
- `align_data`: packed conversations and preference pairs, resumable
- `lora`: low-rank adapters and merging them into the weights
- `merge`: merging models by their parameters (linear, task arithmetic, TIES, DARE-TIES)
- `vision`: image classifiers (a small CNN or ViT) from `VisionConfig`, and seeded augmentation
- `lit_vision`: their LightningModule: cross-entropy, accuracy and augmentation around the classifier
"""
