"""The image workload: labelled images through the same chain as text (acquire, prepare, shards), a classifier
trained and scored on them (`workload`, as `foundry.core.workload` asks it).

- `builtin`: image sources every install has offline (`sklearn://digits`)
- `acquire`: the labelled images of every source, in a stable order; `stage`: the image data stage as the pipeline runs it
- `decode`: one image decoded and fitted; `neardup`, `dedup`: perceptual near copies and which images are kept
- `readpool`: each source image read once, fingerprinted, decoded and its PNG spooled, on every core
- `prepare`: labelled images in, a staged folder out; `table`: its typed rows and audit; `shards`: WebDataset shards
- `validate_images`: stage A's gate for an image dataset
- `training`: the LightningModule and loaders of an image dataset; `finetune`: a registered classifier's fine-tune
- `evaluate`: a classifier's pass over the holdout shards; `validation`: stage E's metrics beside the baselines
- `gate_inputs`: what its gates decide on, a classifier's holdout accuracy against the champion's and the base's
- `scoring`: `foundry evaluate` on images; `purge`: purging images from an image data version
- `card`: a classifier's model card and evaluation table
- `package`: logging a classifier as a served model (its leaf is `foundry.serving.vision_pyfunc`)
- `config`: the workload's config sections, `image` (how images are fitted and checked) and `vision` (the
  classifier), registered in `foundry.core.registrations`
- `fields`: what images add to the shared models: their datasets' fields, a classifier's scores
"""
