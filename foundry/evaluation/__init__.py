"""Stage E, validation: what a model scores and what people look at.

- `metrics`: holdout loss, perplexity and bits per byte, with a unigram baseline
- `holdout_metrics`: a model's holdout scores as one typed value, and the one place naming their MLflow keys
- `align`: alignment's evaluation: held-out conversations and preferences, beside the base
- `report`: the loss curve, the evaluation table and the model card
"""
