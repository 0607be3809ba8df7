"""Domain specialists, one home: fine-tuning a registered model on new data, and merging specialists by their
parameters.

- `finetune`: a fine-tune's config, built on the registered version it starts from
- `merging`: the specialists' common ancestor, the merged weights, the holdouts they are scored on, the gate's inputs
- `gate`: the specialist and merge gates' I/O: their inputs gathered from the registry and the holdouts
- `contracts`: the typed values of a merge: holdout scores and the result

LoRA and the merge arithmetic are pure PyTorch in `models.lora` and `models.merge`; the gates' rules are
`foundry.gates.specialist` and `foundry.gates.merge`.
"""
