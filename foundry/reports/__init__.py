"""What people read at the end of a run, one home.

- `summaries`: what each command prints when its flow ends (and the run page's summary artifact)
- `cards`: the model cards on the registry page (trained, aligned, merged versions) and their evaluation table
- `plots`: the training curve

An image classifier's model card is the image workload's (`foundry.vision.card`).
"""
