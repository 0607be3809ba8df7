"""The promotion gates as pure rules: each gate's I/O gathers a typed `...Inputs` value, and `decide(inputs)`
turns it into the one `Decision` type, with no registry, file or network in sight.

- `pretrain`: a pretraining or retraining challenger against the champion of its name.
- `specialist`: a domain fine-tune against its base and against the specialist's own champion (bits per byte,
  or holdout accuracy for an image classifier).
- `merge`: a merge against the base and each specialist, on every parent's holdout, and against the champion
  of its name on the same holdouts.
- `alignment`: an aligned model against its base and against the champion of its name.
- `decision`: the one `Decision` every gate returns, with its named checks.
- `inputs`: the typed `...Inputs` each gate decides on (any subclass of `GateInputs` that names its `gate`, a
  new workload's too: the image classifier's are `foundry.vision.gate_inputs`), and the `gate.*` tags that record
  them.
- `checks`: the comparisons several gates make, written once.

The gathering lives with the feature each gate judges: the pretraining gate's beside the registry
(`foundry.registry.gate`), the specialist and merge gates' with the specialists (`foundry.specialists.gate`), the
alignment gate's with alignment (`foundry.align.gate`). The typed scores a feature writes and a gate reads (an
aligned model's) are below both, in `foundry.core.metrics.scores`.
"""
